package config

// This file holds the secrets a config may keep in files of their own —
// [admin] token_file, [fleet] key_file, [[peer]] login_file — read when
// the config is loaded, and the warnings about files that hold a secret
// and that others than their owner can read.

import (
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/peerd/peerd/fleet"
	"github.com/peerd/peerd/internal/conf"
)

// secretFile is a file a secret was read from, for the warnings.
type secretFile struct{ key, path string }

// readSecrets puts the secrets kept in files in place of their keys.
func (c *File) readSecrets() []error {
	var es conf.Errors
	read := func(section, key, name string, into *string, check func(string) error) {
		if name == "" {
			return
		}
		v, err := conf.ReadSecret(name)
		if err == nil && check != nil {
			err = check(v)
		}
		if err != nil {
			es.Addf(section, key, "%v", err)
			return
		}
		*into = v
		c.secretFiles = append(c.secretFiles, secretFile{section + "." + key, conf.SecretPath(name)})
	}
	read("admin", "token_file", c.Admin.TokenFile, &c.Admin.Token, nil)
	read("fleet", "key_file", c.Fleet.KeyFile, &c.Fleet.Key, fleet.CheckKey)
	for i := range c.Peers {
		p := &c.Peers[i]
		read(fmt.Sprintf("peer[%d] %q", i, p.Name), "login_file", p.LoginFile, &p.Login, func(v string) error {
			if v != "PASS" && !strings.Contains(v, ":") {
				return fmt.Errorf(`%s: want "user:pass" or "PASS"`, conf.SecretPath(p.LoginFile))
			}
			return nil
		})
	}
	return es
}

// holdsSecret reports whether the config itself holds a secret.
func (c *File) holdsSecret() bool {
	if (c.Admin.Token != "" && c.Admin.TokenFile == "") || (c.Fleet.Key != "" && c.Fleet.KeyFile == "") {
		return true
	}
	for _, p := range c.Peers {
		if p.Login != "" && p.LoginFile == "" {
			return true
		}
	}
	return false
}

// secretWarnings are the files holding a secret that others than their
// owner can read: the config itself, when it holds one, and each *_file.
func (c *File) secretWarnings() []string {
	var w []string
	if c.path != "" && c.holdsSecret() {
		if m, ok := sharedMode(c.path); ok {
			w = append(w, fmt.Sprintf("%s holds a secret (admin.token, fleet.key or a peer's login) and is readable by %s (mode %04o): keep it 0600, or move the secrets to token_file, key_file and login_file (0600)", c.path, readers(m), m.Perm()))
		}
	}
	for _, s := range c.secretFiles {
		if m, ok := sharedMode(s.path); ok {
			w = append(w, fmt.Sprintf("%s: %s is readable by %s (mode %04o): make it 0600", s.key, s.path, readers(m), m.Perm()))
		}
	}
	return w
}

// sharedMode is path's mode when its group or others may read it.
func sharedMode(path string) (fs.FileMode, bool) {
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o044 == 0 {
		return 0, false
	}
	return st.Mode(), true
}

func readers(m fs.FileMode) string {
	switch {
	case m.Perm()&0o004 != 0:
		return "every user"
	default:
		return "its group"
	}
}
