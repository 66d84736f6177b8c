package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFiles: token_file, key_file and login_file put their content
// in place of the key; a file readable by others, or a config holding a
// secret that others can read, is warned about; both forms at once, a
// missing file or a bad key is a problem naming the key.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	token := write("token", "0123456789abcdefghijklmnopqrstuvwxyzABCD\n", 0o600)
	key := write("key", "cGVlcmQtZmxlZXQtdGVzdC1rZXktMzItYnl0ZXMhISE=\n", 0o640)
	login := write("login", "user:secret\n", 0o600)
	cfgPath := write("peerd.toml", `[admin]
token_file = "`+token+`"
[fleet]
bind = "10.0.0.5:7946"
key_file = "`+key+`"
[[peer]]
name = "p1"
host = "10.0.0.1"
login_file = "`+login+`"
tls = true
`, 0o644)
	cfg, ps := Load(cfgPath)
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if cfg.Admin.Token != "0123456789abcdefghijklmnopqrstuvwxyzABCD" || cfg.Fleet.Key == "" || cfg.Peers[0].Login != "user:secret" {
		t.Fatalf("token %q, key %q, login %q; want the files' contents", cfg.Admin.Token, cfg.Fleet.Key, cfg.Peers[0].Login)
	}
	ws := strings.Join(cfg.Warnings(), "\n")
	if !strings.Contains(ws, "fleet.key_file: "+key+" is readable by its group (mode 0640)") {
		t.Fatalf("warnings %q; want the group-readable key file named", ws)
	}
	if strings.Contains(ws, token) || strings.Contains(ws, cfgPath) {
		t.Fatalf("warnings %q; want none for the 0600 token file, nor for a config that holds no secret", ws)
	}

	// The secret in the config itself, readable by every user.
	inline := write("inline.toml", "[admin]\ntoken = \"0123456789abcdefghijklmnopqrstuvwxyzABCD\"\n", 0o644)
	cfg, ps = Load(inline)
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if ws := strings.Join(cfg.Warnings(), "\n"); !strings.Contains(ws, inline+" holds a secret") || !strings.Contains(ws, "every user") {
		t.Fatalf("warnings %q; want the world-readable config holding a token named", ws)
	}

	// Relative names are read from systemd's credentials directory.
	t.Setenv("CREDENTIALS_DIRECTORY", dir)
	cfg, ps = Parse([]byte("[admin]\ntoken_file = \"token\"\n"))
	if len(ps) > 0 || cfg.Admin.Token == "" {
		t.Fatalf("a credential by name: %v, token %q", ps, cfg.Admin.Token)
	}

	for src, want := range map[string]string{
		"[admin]\ntoken = \"x\"\ntoken_file = \"token\"\n":                      "admin.token_file: set token or token_file, not both",
		"[admin]\ntoken_file = \"/nonexistent/token\"\n":                        "admin.token_file: open /nonexistent/token",
		"[fleet]\nbind = \"127.0.0.1:0\"\nkey_file = \"login\"\n":               "fleet.key_file: not base64",
		"[[peer]]\nname = \"p\"\nhost = \"10.0.0.1\"\nlogin_file = \"token\"\n": `login_file: ` + filepath.Join(dir, "token") + `: want "user:pass"`,
	} {
		_, ps := Parse([]byte(src))
		if !strings.Contains(ps.Error(), want) {
			t.Errorf("%q: %v; want %q", src, ps, want)
		}
	}
}
