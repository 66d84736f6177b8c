package fleet

// This file holds the pinning of members' keys (trust on first use, as
// SSH pins a host's key). memberlist takes the newest "alive" it hears
// for a name, with whatever meta it carries, and anyone with the fleet
// key can send one: with the victim's address and a higher incarnation
// it replaced the victim's public key, and with it the right to speak
// for the victim (forge its verdicts, or drown its death reports). So
// the key a name first showed is pinned, and a different one is refused
// while the pinned key is still heard: every member signs a beat every
// beatEvery, so a live member's key is never silent for long. A member
// that restarts (a new key, made at start) is taken with its new key
// once memberlist saw the old one leave or die, or once the old key has
// been silent for keyQuiet. Each refusal is logged, spaced per name.

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/sirupsen/logrus"
)

const (
	// beatEvery is how often a member signs a beat.
	beatEvery = 5 * time.Second
	// keyQuiet is how long a pinned key must be silent before another
	// key may take its name.
	keyQuiet = 4 * beatEvery
	// refusalLogEvery spaces the warnings about one name.
	refusalLogEvery = time.Minute
)

// pin is the key pinned for a name and when it last signed a message.
type pin struct {
	key    ed25519.PublicKey
	heard  time.Time
	logged time.Time // the last refusal logged
}

// pins are a member's pinned keys.
type pins struct {
	mu sync.Mutex
	m  map[string]*pin
}

// check is memberlist's Alive delegate: it pins the key of a name seen
// first, and refuses a different key for a pinned name whose key is
// still heard. now is the member's clock.
func (ps *pins) check(n *memberlist.Node, now time.Time, log logrus.FieldLogger) error {
	key, _ := decodeMeta(n.Meta)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[string]*pin{}
	}
	p := ps.m[n.Name]
	switch {
	case p == nil:
		ps.m[n.Name] = &pin{key: key, heard: now}
		return nil
	case bytes.Equal(p.key, key):
		return nil
	case p.key == nil || now.Sub(p.heard) >= keyQuiet:
		// The pinned key went silent (or there was none): a restart.
		log.WithFields(logrus.Fields{"node": n.Name, "addr": n.Address(), "silent": now.Sub(p.heard).Round(time.Second).String()}).
			Warn("fleet: a member shows a new key; its old one was silent, so the new one is pinned")
		ps.m[n.Name] = &pin{key: key, heard: now}
		return nil
	}
	if now.Sub(p.logged) >= refusalLogEvery {
		p.logged = now
		log.WithFields(logrus.Fields{"node": n.Name, "addr": n.Address()}).
			Error("fleet: refused a new key for a live member (another member may be taking its name); its pinned key stays")
	}
	return fmt.Errorf("member %s shows a key other than the one pinned, which is still in use", n.Name)
}

// key is the key pinned for node (nil: none).
func (ps *pins) key(node string) ed25519.PublicKey {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.m[node]; p != nil {
		return p.key
	}
	return nil
}

// heard notes that node's pinned key signed a message at now.
func (ps *pins) heard(node string, now time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.m[node]; p != nil && now.After(p.heard) {
		p.heard = now
	}
}

// drop unpins a name memberlist saw leave or die: it may come back with
// a new key.
func (ps *pins) drop(node string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.m, node)
}

// aliveDelegate is the member as memberlist's Alive delegate.
type aliveDelegate member

func (a *aliveDelegate) NotifyAlive(n *memberlist.Node) error {
	m := (*member)(a)
	if n.Name == m.node {
		return nil // our own: its key is ours
	}
	return m.pins.check(n, m.clock(), m.f.log)
}

// beatLoop signs a beat every beatEvery until the member stops.
func (m *member) beatLoop() {
	defer m.done.Done()
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		if b, err := m.seal(nil); err == nil {
			m.queueRaw("beat/"+m.node, b)
		}
	}
}
