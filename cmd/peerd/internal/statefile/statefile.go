// Package statefile is the state file (contract section 19): read at
// start, written atomically (temp file, fsync, rename) when it changes and
// at stop. A missing, corrupt or newer file is logged and ignored: it
// never stops peerd from starting.
package statefile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/peerd/peerd/cmd/peerd/internal/config"
	"github.com/peerd/peerd/internal/atomicfile"
	"github.com/peerd/peerd/peers"
)

// stateEvery is how often learned times are written when nothing else
// changed; state changes are written within stateDebounce.
const (
	stateEvery    = 30 * time.Second
	stateDebounce = 500 * time.Millisecond
)

// Load restores what path kept, at start, before any probe.
func Load(reg *peers.Registry, path string, log logrus.FieldLogger) {
	if path == "" {
		return
	}
	b, err := readStateFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		log.WithField("state_file", path).Info("no state file yet; starting afresh")
		return
	case err != nil:
		log.WithFields(logrus.Fields{"state_file": path, "err": err.Error()}).Warn("state file unreadable; ignored")
		return
	}
	st, err := peers.ParseSavedState(b)
	if err != nil {
		log.WithFields(logrus.Fields{"state_file": path, "err": err.Error()}).Warn("state file ignored")
		return
	}
	restored, skipped := reg.ImportState(st, time.Now())
	for name, why := range skipped {
		log.WithFields(logrus.Fields{"state_file": path, "peer": name, "why": why}).Info("state of a peer not restored")
	}
	log.WithFields(logrus.Fields{"state_file": path, "written": st.Written.Format(time.RFC3339), "peers": strings.Join(restored, ",")}).
		Info("state restored (peers are still probed before they get traffic)")
}

// readStateFile reads the state file without waiting on it: it is opened
// non-blocking (a FIFO put there after -check would hang the start) and
// read only when it is a regular file of at most 64 MiB.
func readStateFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > 64<<20 {
		return nil, fmt.Errorf("%s is a %s of %d bytes, not a state file", path, config.FileKind(st.Mode()), st.Size())
	}
	return io.ReadAll(f)
}

// Writer writes the state whenever it changes, until Run's context ends.
type Writer struct {
	Reg      *peers.Registry
	Path     func() string // the state_file in force (a reload may move it)
	Log      logrus.FieldLogger
	last     []byte
	lastPath string
}

// Run writes the state at once, then on each change (a burst settled)
// and every stateEvery, until ctx ends.
func (w *Writer) Run(ctx context.Context) {
	t := time.NewTicker(stateEvery)
	defer t.Stop()
	for {
		ch := w.Reg.Watch()
		w.Write()
		select {
		case <-ctx.Done():
			return
		case <-ch:
			// Let a burst of changes settle into one write.
			select {
			case <-ctx.Done():
				return
			case <-time.After(stateDebounce):
			}
		case <-t.C:
		}
	}
}

// Write writes the state if it changed since the last write.
func (w *Writer) Write() {
	path := w.Path()
	if path == "" {
		return
	}
	st := w.Reg.ExportState(time.Now())
	cmp := st
	cmp.Written = time.Time{}
	key, _ := json.Marshal(cmp)
	if path == w.lastPath && bytes.Equal(key, w.last) {
		return
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err == nil {
		err = atomicfile.Write(path, b, 0o600)
	}
	if err != nil {
		w.Log.WithFields(logrus.Fields{"state_file": path, "err": err.Error()}).Warn("state file not written")
		return
	}
	w.last, w.lastPath = key, path
}
