package auth

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Lines made with openssl passwd (-6, -5, -apr1) and x/crypto/bcrypt.
const (
	sha512Line = `carol:$6$saltsalt$Vd2b/4Dxg.2QfZEXUzBTWCPk7eyodBwe9Y1uDVney3aHpmOzQhTuZJtKMY1uJH3BDnIJkk.d5TRGUEcZTtKNW.`
	sha256Line = `dave:$5$salt5$MbuG.3mBwuxA57eb7NJhBukerQOBR.d19oIxnvaYtt8`
	apr1Line   = `erin:$apr1$aprsalt$7qTYE0FQzI2BE0eyEavkD0`
)

func basicHeader(user, pass string) []byte {
	return []byte("Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
}

func usersFile(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "users")
	os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	return p
}

func TestHtpasswdFormats(t *testing.T) {
	h, _ := bcrypt.GenerateFromPassword([]byte("s3cret-bcrypt"), bcrypt.MinCost)
	b, err := Load(Config{BasicUsers: usersFile(t, "bob:"+string(h), sha512Line, sha256Line, apr1Line), Realm: "r"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for user, pass := range map[string]string{"bob": "s3cret-bcrypt", "carol": "s3cret-512", "dave": "s3cret-256", "erin": "s3cret-apr1"} {
		if got, v := b.Check(basicHeader(user, pass), "10.0.0.1", now); v != Allowed || got != user {
			t.Errorf("%s with the right password: %q %v; want allowed", user, got, v)
		}
		if got, v := b.Check(basicHeader(user, pass+"x"), "10.0.0.2", now); v != Wrong || got != user {
			t.Errorf("%s with a wrong password: %q %v; want wrong, naming the user tried", user, got, v)
		}
	}
	if _, v := b.Check(nil, "10.0.0.1", now); v != Missing {
		t.Errorf("no header: %v; want missing", v)
	}
	// A plain-text or unknown hash line is an error naming no secret.
	for _, bad := range []string{"mallory:plaintext-password", "x:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g="} {
		_, err := Load(Config{BasicUsers: usersFile(t, bad)})
		if err == nil || strings.Contains(err.Error(), "plaintext-password") || strings.Contains(err.Error(), "W6ph5") {
			t.Errorf("line %q: %v; want an error without the secret", bad, err)
		}
	}
}

// TestGuessingIsRefusedBeforeHashing: a source past its failure
// allowance is answered Slowed without a hash being computed, its right
// guess included; a credential verified before the guessing still works
// at once; the allowance refills with time.
func TestGuessingIsRefusedBeforeHashing(t *testing.T) {
	h, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	b, _ := Load(Config{BasicUsers: usersFile(t, "bob:"+string(h), apr1Line), Realm: "r"})
	now := time.Now()
	if _, v := b.Check(basicHeader("erin", "s3cret-apr1"), "10.0.0.9", now); v != Allowed {
		t.Fatalf("erin before any guessing: %v; want allowed", v)
	}
	var verdicts []Verdict
	for i := 0; i < 8; i++ {
		_, v := b.Check(basicHeader("bob", "guess"), "10.0.0.9", now)
		verdicts = append(verdicts, v)
	}
	if verdicts[0] != Wrong || verdicts[7] != Slowed {
		t.Fatalf("verdicts %v; want wrong at first, slowed after the burst", verdicts)
	}
	hashed := b.hashes.Load()
	if user, v := b.Check(basicHeader("bob", "right"), "10.0.0.9", now); v != Slowed || user != "bob" {
		t.Fatalf("the right password from the guessing source: %v; want slowed", v)
	}
	if _, v := b.Check(basicHeader("mallory", "x"), "10.0.0.9", now); v != Slowed {
		t.Fatalf("an unknown user from the guessing source: %v; want slowed", v)
	}
	if n := b.hashes.Load() - hashed; n != 0 {
		t.Fatalf("%d hashes computed for a source over its allowance; want 0", n)
	}
	if _, v := b.Check(basicHeader("erin", "s3cret-apr1"), "10.0.0.9", now); v != Allowed {
		t.Fatalf("erin's cached credential from that source: %v; want allowed", v)
	}
	// Another source guessing bob is slowed too: bob's own allowance is spent.
	if _, v := b.Check(basicHeader("bob", "right"), "10.0.0.10", now); v != Slowed {
		t.Fatalf("bob from another source while bob is guessed: %v; want slowed", v)
	}
	later := now.Add(10 * time.Second)
	if user, v := b.Check(basicHeader("bob", "right"), "10.0.0.9", later); v != Allowed || user != "bob" {
		t.Fatalf("the right password once the allowance refilled: %v; want allowed", v)
	}
	if len(b.verified) != 2 {
		t.Fatalf("%d verified credentials cached; want 2", len(b.verified))
	}
}

// TestUnknownUserCostsAHash: a name the file does not have is hashed
// like a known one (timing does not tell names apart), and its failures
// make no per-user entry (the map stays bounded by the file).
func TestUnknownUserCostsAHash(t *testing.T) {
	h, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	b, _ := Load(Config{BasicUsers: usersFile(t, "bob:"+string(h)), Realm: "r"})
	now := time.Now()
	for i := range 3 {
		if _, v := b.Check(basicHeader(fmt.Sprintf("nobody%d", i), "right"), "10.0.0.1", now); v != Wrong {
			t.Fatalf("an unknown user: %v; want wrong", v)
		}
	}
	if n := b.hashes.Load(); n != 3 {
		t.Fatalf("%d hashes for 3 unknown users; want 3", n)
	}
	if len(b.userFail) != 0 {
		t.Fatalf("unknown users made %d per-user entries; want 0", len(b.userFail))
	}
}

// TestHashPoolDoesNotHoldCachedUsers: with every hashing slot taken (a
// crowd of guessers), a cached credential is answered at once and a new
// one waits for a slot.
func TestHashPoolDoesNotHoldCachedUsers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
		b, _ := Load(Config{BasicUsers: usersFile(t, "bob:"+string(h), apr1Line), Realm: "r"})
		now := time.Now()
		b.Check(basicHeader("bob", "right"), "10.0.0.1", now)
		for range cap(b.hashing) {
			b.hashing <- struct{}{}
		}
		var cached, fresh atomic.Bool
		go func() {
			_, v := b.Check(basicHeader("bob", "right"), "10.0.0.1", now)
			cached.Store(v == Allowed)
		}()
		go func() {
			_, v := b.Check(basicHeader("erin", "s3cret-apr1"), "10.0.0.2", now)
			fresh.Store(v == Allowed)
		}()
		synctest.Wait()
		if !cached.Load() {
			t.Fatal("a cached credential waited for the hashing pool")
		}
		if fresh.Load() {
			t.Fatal("a new credential was hashed with every slot taken")
		}
		for range cap(b.hashing) {
			<-b.hashing
		}
		synctest.Wait()
		if !fresh.Load() {
			t.Fatal("a new credential was not hashed once a slot was free")
		}
	})
}

func FuzzParseBasic(f *testing.F) {
	for _, s := range []string{"Basic Ym9iOnB3", "basic  Ym9iOnB3", "Basic", "Basic =", "Bearer x", "Basic Ym9i", "Basic OnB3", "BASIC Ym9iOnB3\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		user, pass, ok := ParseBasic([]byte(v))
		if !ok {
			return
		}
		if user == "" || strings.Contains(user, ":") {
			t.Fatalf("%q: user %q", v, user)
		}
		// What is accepted encodes back to the same credential.
		u2, p2, ok2 := ParseBasic(basicHeader(user, pass))
		if !ok2 || u2 != user || p2 != pass {
			t.Fatalf("%q: round trip %q %q", v, u2, p2)
		}
	})
}

// FuzzHtpasswd: any file either loads or is refused with an error that
// quotes none of it; a loaded file never lets in an unknown user.
func FuzzHtpasswd(f *testing.F) {
	for _, s := range []string{sha512Line, apr1Line + "\n" + sha256Line, "a:$2y$05$abc", "x", ":", "u:$6$", "#comment\n\n" + apr1Line} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content string) {
		p := filepath.Join(dir, "users")
		os.WriteFile(p, []byte(content), 0o600)
		b, err := Load(Config{BasicUsers: p, Realm: "r"})
		if err != nil {
			if len(content) > 8 && strings.Contains(err.Error(), content) {
				t.Fatalf("the error quotes the file: %v", err)
			}
			return
		}
		if _, v := b.Check(basicHeader("no-such-user-\x01", "x"), "s", time.Now()); v == Allowed {
			t.Fatal("an unknown user was allowed")
		}
	})
}

// BenchmarkCheck: a right bcrypt credential checked every time (the cache
// emptied) against one verified a moment ago (the cache).
func BenchmarkCheck(b *testing.B) {
	h, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.DefaultCost)
	p := filepath.Join(b.TempDir(), "users")
	os.WriteFile(p, []byte("bob:"+string(h)+"\n"), 0o600)
	ba, _ := Load(Config{BasicUsers: p, Realm: "r"})
	hdr := basicHeader("bob", "right")
	now := time.Now()
	b.Run("bcrypt-every-time", func(b *testing.B) {
		for b.Loop() {
			clear(ba.verified)
			ba.Check(hdr, "s", now)
		}
	})
	b.Run("cached", func(b *testing.B) {
		ba.Check(hdr, "s", now)
		for b.Loop() {
			ba.Check(hdr, "s", now)
		}
	})
}
