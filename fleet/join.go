package fleet

// This file holds how a member finds the others: the join loop with its
// back-off, and how a failed join is told (a fleet starting together is
// no error; a wrong key is, at once).

import (
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// kickJoin makes the join loop try now (the join list changed).
func (m *member) kickJoin() {
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		m.join(true)
	}()
}

// joinLoop joins the configured members, with back-off while none
// answers, and again whenever this member is left alone.
func (m *member) joinLoop() {
	defer m.done.Done()
	delay := 500 * time.Millisecond
	for {
		if m.join(false) {
			delay = 500 * time.Millisecond
		} else if delay = delay * 2; delay > 30*time.Second {
			delay = 30 * time.Second
		}
		wait := delay/2 + time.Duration(rand.Int64N(int64(delay/2)+1))
		select {
		case <-m.stop:
			return
		case <-time.After(wait):
		}
	}
}

// join tries the join list when this member is alone (or always when
// force). It reports whether this member has company afterwards. A fleet
// that starts all at once cannot join at first: a failure is logged at
// info (again only when it changes; repeats go to debug), and at error
// once the member has been alone for aloneGrace.
func (m *member) join(force bool) bool {
	targets := m.targets()
	if len(targets) == 0 {
		return true
	}
	if !force && m.ml.NumMembers() > 1 {
		m.aloneSince.Store(0)
		return true
	}
	n, err := m.ml.Join(targets)
	if n > 0 {
		m.f.log.WithFields(logrus.Fields{"node": m.node, "joined": n, "members": m.ml.NumMembers()}).Info("fleet: joined")
		m.lastJoinErr.Store(nil)
		m.aloneSince.Store(0)
		m.aloneLogged.Store(false)
		return true
	}
	if err == nil {
		err = errors.New("no member answered")
	}
	now := time.Now()
	m.aloneSince.CompareAndSwap(0, now.UnixNano())
	alone := now.Sub(time.Unix(0, m.aloneSince.Load()))
	msg := explainJoin(err)
	log := m.f.log.WithFields(logrus.Fields{"node": m.node, "join": strings.Join(targets, ","), "err": err.Error()})
	keyRefused := msg == joinKeyRefused // a mistake that no retry mends: said at once
	switch prev := m.lastJoinErr.Load(); {
	case keyRefused && (prev == nil || *prev != msg):
		m.lastJoinErr.Store(&msg)
		log.Errorf("fleet: cannot join: %s", msg)
	case !keyRefused && alone >= aloneGrace && !m.aloneLogged.Load():
		m.aloneLogged.Store(true)
		m.lastJoinErr.Store(&msg)
		log.WithField("alone", alone.Round(time.Second).String()).Errorf("fleet: still alone after %s: cannot join: %s", alone.Round(time.Second), msg)
	case prev == nil || *prev != msg:
		m.lastJoinErr.Store(&msg)
		log.Infof("fleet: cannot join yet (retrying): %s", msg)
	default:
		log.Debug("fleet: join retry failed")
	}
	return false
}

// joinKeyRefused is explainJoin's word for gossip the members refused.
const joinKeyRefused = "the members refused our gossip: is [fleet] key the same on every member?"

// aloneGrace is how long a member may fail to join before it says so at
// error level: members started together find each other within it.
const aloneGrace = 30 * time.Second

// targets is the join list without this member's own address.
func (m *member) targets() []string {
	self := m.selfAddr
	m.joinMu.Lock()
	defer m.joinMu.Unlock()
	out := make([]string, 0, len(m.cfg.Join))
	for _, j := range m.cfg.Join {
		if j != self && j != m.cfg.Bind {
			out = append(out, j)
		}
	}
	return out
}

// explainJoin turns memberlist's join error into what an operator should
// check.
func explainJoin(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "decrypt") || strings.Contains(s, "encryption") || strings.Contains(s, "Encryption") ||
		strings.Contains(s, "EOF") || strings.Contains(s, "connection reset"):
		return joinKeyRefused
	case strings.Contains(s, "refused"):
		return "no member is listening at the join addresses"
	case strings.Contains(s, "timeout") || strings.Contains(s, "i/o timeout"):
		return "the join addresses do not answer (firewall, or wrong address?)"
	}
	return "no member answered"
}
