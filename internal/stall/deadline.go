package stall

// This file holds Deadline, the one deadline that moves on by peerd's own
// stalls: the round trip's read and first-byte deadlines, the connect
// race's hedge delay, the HTTP probe's reads (Conn) and a connect's
// timeout (WithTimeout) each keep one, so that a stall is counted once however often the deadline is
// looked at, and no caller keeps a loop of its own around the guard.

import (
	"errors"
	"net"
	"os"
	"time"
)

// Deadline is a time that moves on by the stalls since its start: once
// the guard has recorded a stall within it, the deadline is that much
// later, so that only time peerd ran counts against whoever is waited
// for. The zero value never passes (no deadline).
type Deadline struct {
	g         *Guard
	from      time.Time
	at        time.Time
	stretched time.Duration
}

// Deadline starts a deadline d after from (a nil or off Guard never
// stretches it; d ≤ 0 has passed at from already).
func (g *Guard) Deadline(from time.Time, d time.Duration) Deadline {
	return Deadline{g: g, from: from, at: from.Add(max(d, 0))}
}

// Set reports whether the deadline is one (not the zero Deadline).
func (d *Deadline) Set() bool { return !d.at.IsZero() }

// At is the deadline as stretched so far (zero for none).
func (d *Deadline) At() time.Time { return d.at }

// Passed reports whether the deadline has passed at now, once the stalls
// since its start not yet counted have moved it on.
func (d *Deadline) Passed(now time.Time) bool {
	if d.at.IsZero() || now.Before(d.at) {
		return false
	}
	d.stretch(now)
	return !now.Before(d.at)
}

// Left is how long until the deadline at now, once stretched by the
// stalls not yet counted; 0 or less once it passed. The zero Deadline
// has no end: Left is then the largest duration.
func (d *Deadline) Left(now time.Time) time.Duration {
	if d.at.IsZero() {
		return 1<<63 - 1
	}
	if !now.Before(d.at) {
		d.stretch(now)
	}
	return d.at.Sub(now)
}

// stretch moves the deadline on by the stalls since the start that it
// has not yet been moved by, and reports whether it moved.
func (d *Deadline) stretch(now time.Time) bool {
	s := d.g.Stalled(d.from, now) - d.stretched
	if s <= 0 {
		return false
	}
	d.stretched += s
	d.at = d.at.Add(s)
	return true
}

// Conn is c with reads under a Deadline d after from: a read that times
// out while the deadline has moved on (peerd was stalled) reads on, so
// that whoever is read from is blamed for a timeout only when it had
// all of it.
func (g *Guard) Conn(c net.Conn, from time.Time, d time.Duration) net.Conn {
	sc := &deadlineConn{Conn: c, deadline: g.Deadline(from, d)}
	c.SetDeadline(sc.deadline.At())
	return sc
}

// deadlineConn is Conn's connection.
type deadlineConn struct {
	net.Conn
	deadline Deadline
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err == nil || n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) || c.deadline.Passed(time.Now()) {
			return n, err
		}
		c.Conn.SetDeadline(c.deadline.At())
	}
}
