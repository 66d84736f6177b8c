package fleet

// This file holds memberlist's view of a member: the broadcast queue's
// messages, the delegate that sends and receives verdicts, membership
// events, and memberlist's log lines turned into logrus entries.

import (
	"crypto/ed25519"
	"strings"

	"github.com/hashicorp/memberlist"
	"github.com/sirupsen/logrus"
)

// broadcast is one queued message; a newer verdict from the same node
// about the same peer replaces an older one still in the queue.
type broadcast struct {
	name string
	msg  []byte
}

func (b *broadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(*broadcast)
	return ok && ob.name == b.name
}
func (b *broadcast) Name() string    { return b.name }
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}

// delegate is memberlist's view of a member.
type delegate member

// NodeMeta is this member's public key (the others verify its messages
// with it), then where its proxy port is and its load (shared.go).
func (d *delegate) NodeMeta(limit int) []byte {
	m := (*member)(d)
	pub := m.priv.Public().(ed25519.PublicKey)
	b := encodeMeta(pub, meta{HTTP: m.advertised(), Load: m.f.shared.inFlight.Load(), Leaving: m.leaving.Load()})
	if len(b) > limit {
		if len(pub) > limit {
			return nil
		}
		return pub
	}
	return b
}

func (d *delegate) NotifyMsg(b []byte) { (*member)(d).accept(b, true) }

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.queue.GetBroadcasts(overhead, limit)
}

// LocalState is this member's own verdicts and the purges of the last
// purge_log, signed, for a full state exchange (a member that rejoins
// gets the purges it missed).
func (d *delegate) LocalState(join bool) []byte {
	m := (*member)(d)
	m.f.mu.Lock()
	vs := make([]Verdict, 0, len(m.f.own))
	for _, v := range m.f.own {
		v.Node = m.node
		vs = append(vs, v)
	}
	m.f.mu.Unlock()
	b, _ := m.sealMsg(message{Verdicts: vs, Purges: m.f.purges.recent()})
	return b
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) { (*member)(d).accept(buf, false) }

// events logs membership changes and drops the views of members that
// leave.
type events member

func (e *events) NotifyJoin(n *memberlist.Node) {
	m := (*member)(e)
	m.f.shared.noteMember(n)
	if n.Name != m.node {
		m.f.log.WithFields(logrus.Fields{"node": n.Name, "addr": n.Address()}).Info("fleet: member joined")
	}
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	m := (*member)(e)
	m.f.shared.dropMember(n.Name)
	m.f.forget(n.Name)
	m.pins.drop(n.Name)
	log := m.f.log.WithFields(logrus.Fields{"node": n.Name, "addr": n.Address()})
	if _, mt := decodeMeta(n.Meta); mt.Leaving {
		log.Info("fleet: member left") // a planned leave: a stop, an upgrade's old process
		return
	}
	log.Warn("fleet: member failed (its keys move to the others)")
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	(*member)(e).f.shared.noteMember(n)
}

func (e *events) NotifyConflict(existing, other *memberlist.Node) {
	m := (*member)(e)
	m.f.log.WithFields(logrus.Fields{"node": existing.Name, "addr": existing.Address(), "other": other.Address()}).
		Error("fleet: two members share a node name; give each a distinct [fleet] node")
}

// unreadableLines are the memberlist errors that what a remote sent
// causes: a datagram or stream that is not gossip under this fleet's key.
var unreadableLines = []string{
	"decrypt", "Decrypt packet failed", "failed to receive", "Failed to receive", "unacceptable label",
	"double stream label", "double packet label", "Received invalid msgType", "Failed to decode ping",
	"Failed to read remote state", "missing message type byte", "Encryption is configured but remote state is not encrypted",
	"No installed keys could decrypt",
}

// unreadableInput reports a memberlist line about input it could not read.
func unreadableInput(msg string) bool {
	for _, s := range unreadableLines {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// logWriter sends memberlist's log lines ("[WARN] memberlist: ...") to
// logrus at their level.
type logWriter struct {
	l      logrus.FieldLogger
	failed *decryptFailures // where undecryptable datagrams are counted
}

func (w logWriter) Write(b []byte) (int, error) {
	s := strings.TrimSpace(string(b))
	level, msg := "", s
	if strings.HasPrefix(s, "[") {
		if i := strings.IndexByte(s, ']'); i > 0 {
			level, msg = s[1:i], strings.TrimSpace(s[i+1:])
		}
	}
	if unreadableInput(msg) {
		// A datagram or a connection under another key, or not gossip at
		// all (a port scan, a plaintext client): anyone who reaches the
		// port can send those, so each is a debug line and the warning is
		// a summary.
		w.l.Debug(msg)
		w.failed.note(w.l)
		return len(b), nil
	}
	switch level {
	case "ERR", "ERROR":
		w.l.Error(msg)
	case "WARN":
		w.l.Warn(msg)
	case "INFO":
		w.l.Info(msg)
	default:
		w.l.Debug(msg)
	}
	return len(b), nil
}
