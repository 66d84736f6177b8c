package forwarding

// This file holds the deadlines of a connection, client or upstream:
// cached, so that a deadline is moved only when it would end too early or
// much too late.

import (
	"errors"
	"net"
	"os"
	"time"
)

// deadlines caches the read and write deadlines in force on a connection,
// so that one is moved only when it would end too early or much too late:
// a timeout d ends a wait between d and 1.25 d after it began, and a steady
// stream of short requests re-arms no timer (each move is a runtime timer
// update, and they were a good part of a request's cost).
type deadlines struct {
	nc          net.Conn
	read, write time.Time // in force; zero: none
}

// readIn makes a read that starts now time out after t (to t + t/4).
func (d *deadlines) readIn(now time.Time, t time.Duration) {
	if lo := now.Add(t); d.read.Before(lo) || d.read.After(lo.Add(t/4)) {
		d.read = lo.Add(t / 4)
		d.nc.SetReadDeadline(d.read)
	}
}

// writeIn makes a write that starts now time out after t (to t + t/4).
func (d *deadlines) writeIn(now time.Time, t time.Duration) {
	if lo := now.Add(t); d.write.Before(lo) || d.write.After(lo.Add(t/4)) {
		d.write = lo.Add(t / 4)
		d.nc.SetWriteDeadline(d.write)
	}
}

// readBy makes a read that starts now end at or a little before at (to
// at - slack): a deadline in force in that window is kept. A read that
// ends early finds the time not yet come and waits again to at exactly;
// one that ends at at never waits past it. For the first-byte timeout,
// which would otherwise move the deadline (a runtime timer update) on
// every request a parent answers in time.
func (d *deadlines) readBy(now, at time.Time, slack time.Duration) {
	if !d.read.After(now) || d.read.After(at) || d.read.Before(at.Add(-slack)) {
		d.read = at
		d.nc.SetReadDeadline(at)
	}
}

// clearPassed drops the read and write deadlines if they passed by now.
func (d *deadlines) clearPassed(now time.Time) {
	if !d.read.IsZero() && !d.read.After(now) {
		d.setRead(time.Time{})
	}
	if !d.write.IsZero() && !d.write.After(now) {
		d.write = time.Time{}
		d.nc.SetWriteDeadline(time.Time{})
	}
}

// setRead sets an exact read deadline (zero: none; in the past: now).
func (d *deadlines) setRead(at time.Time) {
	d.read = at
	d.nc.SetReadDeadline(at)
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
