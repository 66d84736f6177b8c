// Package auth is proxy authentication (contract section 18, [auth]):
// Basic credentials checked against an htpasswd file (bcrypt,
// SHA-256-crypt, SHA-512-crypt and apr1 lines), with verified credentials
// cached briefly so that bcrypt does not cost every request.
//
// Guessing is bounded three ways. A source (or a user name) past its
// failure allowance is answered 429 before any hash is computed, so a
// right guess made then is refused too. Hashes run on a small pool, so
// guessers queue behind each other, never in front of users whose
// credentials are cached. An unknown user costs a hash like a known one
// (against a hash of the file's own kind), so timing does not tell which
// names exist.
//
// The htpasswd lines are read by github.com/tg123/go-htpasswd (its
// parsers for bcrypt, crypt-sha and md5/apr1, compared in constant time;
// its plain-text parser is left out, so a malformed hash is an error, not
// a password).
package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
	// dummy is a hash of the file's first line: what an unknown user's
	// password is checked against, so that it costs what a known one does.
	dummy htpasswd.EncodedPasswd
	// hashing bounds the hashes computed at once (its capacity).
	hashing chan struct{}
	hashes  atomic.Int64 // hashes computed (for tests)

	mu       sync.Mutex
	verified map[[32]byte]time.Time // credential digest -> cached until
	sources  map[string]*rate.Limiter
	userFail map[string]*rate.Limiter // known users only: the map is bounded by the file
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
	raw, err := os.ReadFile(c.BasicUsers)
	if err != nil {
		return nil, fmt.Errorf("auth.basic_users: %s: cannot be read", c.BasicUsers)
	}
	bad := 0
	f, err := htpasswd.NewFromReader(bytes.NewReader(raw), parsers, func(error) { bad++ }) // (its errors quote the hash: never printed)
	if err != nil {
		return nil, fmt.Errorf("auth.basic_users: %s: cannot be read", c.BasicUsers)
	}
	if bad > 0 {
		return nil, fmt.Errorf("auth.basic_users: %s: %d line(s) are not user:hash with a bcrypt, SHA-256/512-crypt or apr1 hash", c.BasicUsers, bad)
	}
	return &Basic{users: f, realm: c.Realm, dummy: firstHash(raw),
		hashing:  make(chan struct{}, max(1, runtime.NumCPU()/2)),
		verified: map[[32]byte]time.Time{}, sources: map[string]*rate.Limiter{}, userFail: map[string]*rate.Limiter{}}, nil
}

// firstHash is the hash of the file's first user line (nil for a file
// with none: then no user exists, and no hash is needed to say so).
func firstHash(raw []byte) htpasswd.EncodedPasswd {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		_, hash, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		for _, p := range parsers {
			if e, err := p(hash); err == nil && e != nil {
				return e
			}
		}
	}
	return nil
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
// was tried, as Squid's does; never the password). A credential verified
// within the last minute is taken at once. Any other, from a source or
// for a user past its failure allowance, is Slowed before it is hashed:
// right or wrong, it is not looked at until the allowance refills.
func (b *Basic) Check(header []byte, source string, now time.Time) (string, Verdict) {
	user, pass, ok := ParseBasic(header)
	if !ok {
		return "", Missing
	}
	key := sha256.Sum256([]byte(user + "\x00" + pass))
	b.mu.Lock()
	until, cached := b.verified[key]
	over := b.over(b.sources, source, now) || b.over(b.userFail, user, now)
	b.mu.Unlock()
	if cached && now.Before(until) {
		return user, Allowed
	}
	if over {
		return user, Slowed
	}
	if b.match(user, pass) {
		b.mu.Lock()
		if len(b.verified) >= maxVerified {
			clear(b.verified)
		}
		b.verified[key] = now.Add(verifiedFor)
		b.mu.Unlock()
		return user, Allowed
	}
	if !b.failed(source, user, now) {
		return user, Slowed
	}
	return user, Wrong
}

// match hashes pass on the pool: against user's hash, or against the
// dummy for a user the file does not have (the answer is then false
// whatever the hash says).
func (b *Basic) match(user, pass string) bool {
	b.hashing <- struct{}{}
	defer func() { <-b.hashing }()
	b.hashes.Add(1)
	if b.users.Exists(user) {
		return b.users.Match(user, pass)
	}
	if b.dummy != nil {
		b.dummy.MatchesPassword(pass)
	}
	return false
}

// over reports whether key's failure allowance is spent (b.mu held).
func (b *Basic) over(m map[string]*rate.Limiter, key string, now time.Time) bool {
	l := m[key]
	return l != nil && l.TokensAt(now) < 1
}

// failed spends one failure of source and, for a user the file has, of
// user; false when either is past its allowance (5 in a burst, then one
// a second).
func (b *Basic) failed(source, user string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok := spend(b.sources, source, now)
	if b.users.Exists(user) {
		ok = spend(b.userFail, user, now) && ok
	}
	return ok
}

// spend takes one failure from key's allowance; false when none was left.
func spend(m map[string]*rate.Limiter, key string, now time.Time) bool {
	l := m[key]
	if l == nil {
		if len(m) >= maxSources {
			clear(m)
		}
		l = rate.NewLimiter(1, 5)
		m[key] = l
	}
	return l.AllowN(now, 1)
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
