// Package auth is proxy authentication (contract section 18, [auth]):
// Basic credentials checked against an htpasswd file (bcrypt,
// SHA-256-crypt, SHA-512-crypt and apr1 lines), with verified credentials
// cached briefly so that bcrypt does not cost every request, and failed
// ones slowed down per source and user without ever refusing a correct
// one.
//
// The htpasswd lines are read by github.com/tg123/go-htpasswd (its
// parsers for bcrypt, crypt-sha and md5/apr1, compared in constant time;
// its plain-text parser is left out, so a malformed hash is an error, not
// a password).
package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/conf"
	htpasswd "github.com/tg123/go-htpasswd"
	"golang.org/x/time/rate"
)

// Config is the [auth] section.
type Config struct {
	// BasicUsers is an htpasswd file; with it every request needs
	// Proxy-Authorization: Basic. "" turns authentication off.
	BasicUsers string `toml:"basic_users"`
	// Realm is what the 407's Proxy-Authenticate names.
	Realm string `toml:"realm"`
}

// DefaultConfig returns the built-in [auth] defaults.
func DefaultConfig() Config { return Config{Realm: "peerd"} }

// Validate checks the words; the file is read by Load.
func (c Config) Validate() error {
	var es conf.Errors
	if strings.ContainsAny(c.Realm, "\"\\\r\n") {
		es.Addf("auth", "realm", "must not hold quotes, backslashes or line breaks")
	}
	return es.Err()
}

// parsers are the hash formats accepted: bcrypt, SHA-256/512-crypt
// ($5$, $6$) and MD5-crypt/apr1 ($1$, $apr1$).
var parsers = []htpasswd.PasswdParser{htpasswd.AcceptBcrypt, htpasswd.AcceptCryptSha, htpasswd.AcceptMd5}

// Basic checks Basic credentials against an htpasswd file.
type Basic struct {
	users *htpasswd.File
	realm string

	mu       sync.Mutex
	verified map[[32]byte]time.Time // credential digest -> cached until
	failures map[string]*rate.Limiter
}

// verifiedFor is how long a verified credential is not checked again;
// maxVerified bounds the cache.
const (
	verifiedFor = time.Minute
	maxVerified = 4096
	maxSources  = 4096
)

// Load reads an htpasswd file; every line it cannot read is an error
// naming the line (never the hash).
func Load(c Config) (*Basic, error) {
	if c.BasicUsers == "" {
		return nil, nil
	}
	if _, err := os.Stat(c.BasicUsers); err != nil {
		return nil, fmt.Errorf("auth.basic_users: %v", err)
	}
	bad := 0
	f, err := htpasswd.New(c.BasicUsers, parsers, func(error) { bad++ }) // (its errors quote the hash: never printed)
	if err != nil {
		return nil, fmt.Errorf("auth.basic_users: %s: cannot be read", c.BasicUsers)
	}
	if bad > 0 {
		return nil, fmt.Errorf("auth.basic_users: %s: %d line(s) are not user:hash with a bcrypt, SHA-256/512-crypt or apr1 hash", c.BasicUsers, bad)
	}
	return &Basic{users: f, realm: c.Realm, verified: map[[32]byte]time.Time{}, failures: map[string]*rate.Limiter{}}, nil
}

// Realm is the realm of the 407 challenge.
func (b *Basic) Realm() string { return b.realm }

// Verdict is the outcome of a credential check.
type Verdict uint8

const (
	// Allowed: the credential is right.
	Allowed Verdict = iota
	// Missing: no Basic credential (407).
	Missing
	// Wrong: a wrong credential (407).
	Wrong
	// Slowed: a wrong credential past its source's allowance (429).
	Slowed
)

// Check verifies a Proxy-Authorization value from source; it returns the
// user name it names (for Wrong and Slowed too: the access log says who
// was tried, as Squid's does; never the password). A right credential is
// never refused, whatever failed before from the same source.
func (b *Basic) Check(header []byte, source string, now time.Time) (string, Verdict) {
	user, pass, ok := ParseBasic(header)
	if !ok {
		return "", Missing
	}
	key := sha256.Sum256([]byte(user + "\x00" + pass))
	b.mu.Lock()
	until, cached := b.verified[key]
	b.mu.Unlock()
	if cached && now.Before(until) {
		return user, Allowed
	}
	if b.users.Match(user, pass) {
		b.mu.Lock()
		if len(b.verified) >= maxVerified {
			clear(b.verified)
		}
		b.verified[key] = now.Add(verifiedFor)
		b.mu.Unlock()
		return user, Allowed
	}
	if !b.failed(source, user) {
		return user, Slowed
	}
	return user, Wrong
}

// failed spends one failure of source and of user; false when either is
// past its allowance (5 in a burst, then one a second).
func (b *Basic) failed(source, user string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok := true
	for _, k := range []string{"src " + source, "user " + user} {
		l := b.failures[k]
		if l == nil {
			if len(b.failures) >= maxSources {
				clear(b.failures)
			}
			l = rate.NewLimiter(1, 5)
			b.failures[k] = l
		}
		if !l.Allow() {
			ok = false
		}
	}
	return ok
}

// ParseBasic reads "Basic base64(user:pass)" (RFC 7617; the scheme is
// case-insensitive, surrounding whitespace ignored). The user may not be
// empty nor hold a colon; the password may hold anything but control
// characters.
func ParseBasic(v []byte) (user, pass string, ok bool) {
	v = bytes.TrimSpace(v)
	if len(v) < 6 || !strings.EqualFold(string(v[:6]), "basic ") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(string(bytes.TrimLeft(v[6:], " ")))
	if err != nil {
		return "", "", false
	}
	u, p, found := bytes.Cut(raw, []byte(":"))
	if !found || len(u) == 0 {
		return "", "", false
	}
	for _, c := range raw {
		if c < 0x20 || c == 0x7f {
			return "", "", false
		}
	}
	return string(u), string(p), true
}
