package cli

// This file holds how the admin commands read a config: only its [admin]
// table (listen, token, token_file). A mistake elsewhere in the file — a
// half-edited [[peer]], a wrong type under [health] — is start-up's and
// -check's business; it never stops status, reload or drain mid-incident.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/peerd/peerd/admin"
	"github.com/peerd/peerd/internal/conf"
)

// fileError is a config or token file the command could not use: exit 1,
// never "unreachable".
type fileError struct{ err error }

func (e *fileError) Error() string { return e.err.Error() }
func (e *fileError) Unwrap() error { return e.err }

// adminSection is all the admin commands read of a config.
type adminSection struct {
	Admin struct {
		Listen    string `toml:"listen"`
		Token     string `toml:"token"`
		TokenFile string `toml:"token_file"`
	} `toml:"admin"`
}

// adminFromConfig reads the admin address to dial and the token from a
// config file; the default path, when it is not there, is the embedded
// default's address.
func adminFromConfig(path string, explicit bool) (addr, token string, err error) {
	src, rerr := os.ReadFile(path)
	if rerr != nil {
		if !explicit && errors.Is(rerr, os.ErrNotExist) {
			return admin.DefaultConfig().Listen, "", nil
		}
		return "", "", &fileError{fmt.Errorf("reading the admin address: %v", rerr)}
	}
	sec, err := readAdmin(src)
	if err != nil {
		return "", "", &fileError{fmt.Errorf("reading the admin address from %s: %v", path, err)}
	}
	token = sec.Admin.Token
	if token == "" && sec.Admin.TokenFile != "" {
		if token, err = conf.ReadSecret(sec.Admin.TokenFile); err != nil {
			return "", "", &fileError{fmt.Errorf("reading admin.token_file: %v", err)}
		}
	}
	listen := sec.Admin.Listen
	if listen == "" {
		listen = admin.DefaultConfig().Listen
	}
	return dialable(listen), token, nil
}

// readAdmin decodes the [admin] table of src. The whole file is decoded
// first (keys outside [admin] are ignored, whatever their types); when it
// is no valid TOML, the [admin] table alone is.
func readAdmin(src []byte) (adminSection, error) {
	var sec adminSection
	if _, err := toml.Decode(string(src), &sec); err == nil {
		return sec, nil
	}
	sec = adminSection{}
	_, err := toml.Decode(adminTable(src), &sec)
	if err != nil {
		return sec, fmt.Errorf("[admin]: %v", strings.TrimPrefix(err.Error(), "toml: "))
	}
	return sec, nil
}

// adminTable is the [admin] header and the lines up to the next table
// header, with every other line blanked so that a decoder's line numbers
// stay the file's.
func adminTable(src []byte) string {
	var out strings.Builder
	in := false
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "[") {
			header, _, _ := strings.Cut(t, "#")
			in = strings.TrimSpace(header) == "[admin]"
		}
		if in {
			out.WriteString(line)
		}
		out.WriteByte('\n')
	}
	return out.String()
}
