package conf

// This file holds how a secret kept in a file of its own ([admin]
// token_file, [fleet] key_file, [[peer]] login_file) is found and read:
// the config loader and the command line's admin commands share it.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SecretPath is where a *_file value is read: a relative name under
// systemd's $CREDENTIALS_DIRECTORY when it is set (LoadCredential=), as
// given otherwise.
func SecretPath(name string) string {
	if dir := os.Getenv("CREDENTIALS_DIRECTORY"); dir != "" && !filepath.IsAbs(name) {
		return filepath.Join(dir, name)
	}
	return name
}

// ReadSecret reads a secret file: its content without the line end.
func ReadSecret(name string) (string, error) {
	b, err := os.ReadFile(SecretPath(name))
	if err != nil {
		return "", err
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("%s is empty", SecretPath(name))
	}
	return v, nil
}
