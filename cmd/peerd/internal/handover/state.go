package handover

// This file holds the operator state a binary upgrade hands over itself,
// state file or not: a pipe to the new process carries two frames (a
// 4-byte big-endian length, then the bytes). The first is the state as
// the upgrade starts, read by the new process before it serves; the
// second is the state as this process lets go (after its admin API
// stopped taking changes), so that a drain made while both ran is not
// lost either. A drain made just before SIGUSR2 is in the first frame,
// whether or not the state file had been written yet.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"
)

// envState is the fd of the state pipe in a process started by an
// upgrade.
const envState = "PEERD_UPGRADE_STATE"

// maxStateFrame bounds one frame (a state of many peers' histories is a
// few hundred KB).
const maxStateFrame = 64 << 20

// stateWait bounds how long the new process waits for the first frame.
const stateWait = 10 * time.Second

// writeFrame writes one frame.
func writeFrame(w io.Writer, b []byte) error {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// readFrame reads one frame.
func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxStateFrame {
		return nil, fmt.Errorf("a state frame of %d bytes (at most %d)", size, maxStateFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// stateFromEnv opens the state pipe this process was handed, if any.
func stateFromEnv() *os.File {
	fd, err := strconv.Atoi(os.Getenv(envState))
	os.Unsetenv(envState)
	if err != nil || fd <= 2 {
		return nil
	}
	// Non-blocking, so that the read can have a deadline.
	syscall.SetNonblock(fd, true)
	return os.NewFile(uintptr(fd), "peerd-state")
}

// HandedState is the operator state the process that started this one
// had as the upgrade began (nil when this process was not started by an
// upgrade, or the old one sent none in time).
func (u *Upgrader) HandedState() ([]byte, error) {
	if u.stateIn == nil {
		return nil, nil
	}
	u.stateIn.SetReadDeadline(time.Now().Add(stateWait))
	b, err := readFrame(u.stateIn)
	u.stateIn.SetReadDeadline(time.Time{})
	if err != nil {
		u.stateIn.Close()
		u.stateIn = nil
		return nil, fmt.Errorf("no operator state from the old process: %w", err)
	}
	return b, nil
}

// LateState calls apply with the operator state the old process had when
// it let go, if it sends one (it may end first: apply is then not
// called). It returns at once; apply runs on another goroutine.
func (u *Upgrader) LateState(apply func([]byte)) {
	in := u.stateIn
	u.stateIn = nil
	if in == nil {
		return
	}
	go func() {
		defer in.Close()
		b, err := readFrame(in)
		if err == nil {
			apply(b)
		} else if !errors.Is(err, io.EOF) {
			u.log.WithField("err", err.Error()).Warn("binary upgrade: the old process's last operator state was not read")
		}
	}()
}

// sendState writes a frame of the current state to the new process.
func (u *Upgrader) sendState(w io.Writer) error {
	if u.State == nil {
		return writeFrame(w, nil)
	}
	return writeFrame(w, u.State())
}

// SendLateState hands the new process the operator state as this one
// lets go (its admin API no longer takes changes), then closes the pipe.
// An old process that handed over calls it once.
func (u *Upgrader) SendLateState() {
	out := u.stateOut
	if out == nil {
		return
	}
	<-u.firstSent
	u.stateOut = nil
	defer out.Close()
	out.SetWriteDeadline(time.Now().Add(stateWait))
	if err := u.sendState(out); err != nil {
		u.log.WithField("err", err.Error()).Warn("binary upgrade: the last operator state was not handed to the new process")
	}
}

// dropState closes the pipe to a new process that failed.
func (u *Upgrader) dropState() {
	if out := u.stateOut; out != nil {
		<-u.firstSent
		u.stateOut = nil
		out.Close()
	}
}
