package fleet

// This file holds what a member believes of the others: signed messages,
// and the checks a verdict passes before it is recorded or acted on.
//
// The [fleet] key keeps outsiders out, but every member has it, so it
// cannot tell members apart. So each member signs what it sends with a
// key pair of its own (ed25519, made at start), whose public half is its
// memberlist node meta; a receiver verifies a message against the meta
// of the node the message names, and takes from it only verdicts of that
// node. A member with the fleet key can then speak only for itself: it
// cannot forge another member's verdicts, nor plant views under names
// that are not members. A verdict is further recorded only about a peer
// this member has, never with a time in the future (which would freeze
// that member's real reports), and suspicions from one member about one
// peer are spaced, so a lying member costs at most one probe per peer per
// suspectEvery.

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus"
)

const (
	// envelopeVersion is the wire version of signed messages.
	envelopeVersion = 2
	// maxSkew is how far in the future a verdict's time may be (clocks
	// of members differ a little).
	maxSkew = time.Minute
	// suspectEvery spaces the suspicions one member's verdicts cause
	// about one peer.
	suspectEvery = 10 * time.Second
)

// envelope is a message on the wire: an encoded message (the body),
// signed by the member named.
type envelope struct {
	V    int    `json:"v"`
	Node string `json:"node"`
	Body []byte `json:"body"`
	Sig  []byte `json:"sig"`
}

func newKey() ed25519.PrivateKey {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("fleet: no randomness for a signing key: %v", err))
	}
	return priv
}

// signed is what a signature covers: the node name and the body.
func signed(node string, body []byte) []byte {
	return append(append([]byte(node), 0), body...)
}

// seal encodes verdicts as this member's signed message.
func (m *member) seal(vs []Verdict) ([]byte, error) { return m.sealMsg(message{Verdicts: vs}) }

// sealMsg encodes msg as this member's signed message.
func (m *member) sealMsg(msg message) ([]byte, error) {
	body, err := encodeMsg(msg)
	if err != nil {
		return nil, err
	}
	return json.Marshal(envelope{V: envelopeVersion, Node: m.node, Body: body, Sig: ed25519.Sign(m.priv, signed(m.node, body))})
}

// errForged: a message whose signature does not match the member it
// names.
var errForged = errors.New("signature does not match the member it names")

// open checks a message and returns its sender and verdicts: it must be
// signed by the member it names, a current member, and every verdict in
// it must be that member's own.
func (m *member) open(b []byte) (string, []Verdict, error) {
	node, msg, err := m.openMsg(b)
	return node, msg.Verdicts, err
}

// openMsg is open with the whole message (its purges and
// acknowledgements too: a purge may be relayed from the member that
// started it, so it names that member, not the sender).
func (m *member) openMsg(b []byte) (string, message, error) {
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return "", message{}, fmt.Errorf("not a fleet message: %v", err)
	}
	if e.V != envelopeVersion {
		return "", message{}, fmt.Errorf("fleet message version %d; this member speaks %d", e.V, envelopeVersion)
	}
	if e.Node == "" || len(e.Node) > maxField {
		return "", message{}, errors.New("no sender")
	}
	pub := m.publicKey(e.Node)
	if pub == nil {
		return "", message{}, fmt.Errorf("sender %q is not a member", e.Node)
	}
	if len(e.Sig) != ed25519.SignatureSize || !ed25519.Verify(pub, signed(e.Node, e.Body), e.Sig) {
		return "", message{}, errForged
	}
	m.pins.heard(e.Node, m.clock())
	msg, err := decodeMsg(e.Body)
	if err != nil {
		return "", message{}, err
	}
	for _, v := range msg.Verdicts {
		if v.Node != e.Node {
			return "", message{}, fmt.Errorf("member %s sent a verdict in the name of %s", e.Node, v.Node)
		}
	}
	return e.Node, msg, nil
}

// publicKey is node's pinned key (pins.go); nil when node is not a
// current member (or has no key).
func (m *member) publicKey(node string) ed25519.PublicKey {
	if m.keyOf != nil {
		return m.keyOf(node)
	}
	if m.ml == nil || node == m.node {
		return nil
	}
	return m.pins.key(node)
}

func (m *member) clock() time.Time {
	if m.now != nil {
		return m.now()
	}
	return time.Now()
}

// accept takes a message from the network: checked, then applied; relay
// re-broadcasts a new single verdict once, as it came (signature and all).
func (m *member) accept(b []byte, relay bool) {
	from, msg, err := m.openMsg(b)
	if err != nil {
		m.f.log.WithError(err).Debug("fleet: message dropped")
		return
	}
	vs := msg.Verdicts
	var raw []byte
	if relay && len(vs) == 1 {
		raw = b
	}
	if len(vs) > 0 {
		m.f.receive(m, vs, raw)
	}
	if len(msg.Purges) > 0 {
		m.f.receivePurges(m, msg.Purges)
	}
	if len(msg.Acks) > 0 {
		m.f.receiveAcks(from, msg.Acks)
	}
}

// receive applies verified verdicts from another member. A verdict newer
// than the last one from its node about its peer, about a peer this
// member has, and not from the future, is recorded; a death makes the
// local peer of that name (or address) suspect, at most once per
// suspectEvery for one member and peer. raw, when set, is the message to
// relay once if it brought news, so that it spreads epidemically.
func (f *Fleet) receive(m *member, vs []Verdict, raw []byte) {
	type suspicion struct {
		p      *peers.Peer
		detail string
		answer bool // an answer death: settled by an HTTP probe
	}
	var todo []suspicion
	news := false
	now := m.clock()
	f.mu.Lock()
	for _, v := range vs {
		if v.Node == m.node {
			continue // our own, relayed back
		}
		if v.At > now.Add(maxSkew).UnixNano() {
			continue // from the future: it would shadow the member's real reports
		}
		p := f.local(v)
		if p == nil {
			continue // not a peer of ours: nothing to keep
		}
		view := f.views[v.Node]
		if view == nil {
			view = map[string]Verdict{}
			f.views[v.Node] = view
		}
		if prev, ok := view[v.Peer]; ok && prev.At >= v.At {
			continue // old news
		}
		view[v.Peer] = v
		news = true
		if v.State != StateDead {
			continue
		}
		key := v.Node + "\x00" + p.Name()
		if last, ok := f.suspected[key]; ok && now.Sub(last) < suspectEvery {
			continue
		}
		f.suspected[key] = now
		detail := fmt.Sprintf("fleet member %s reported %s (%s) dead", v.Node, v.Peer, v.Addr)
		if v.Cause == "answer" {
			detail += " by its answers"
		}
		todo = append(todo, suspicion{p, detail, v.Cause == "answer"})
	}
	f.mu.Unlock()
	if news && raw != nil {
		m.queueRaw(vs[0].Node+"/"+vs[0].Peer, raw)
	}
	for _, s := range todo {
		f.reg.Observe(s.p, peers.Outcome{Event: peers.Reported, Cause: peers.CauseFleet, Detail: s.detail, Answers: s.answer})
	}
}

// local finds the peer a verdict is about: by name, else by address.
func (f *Fleet) local(v Verdict) *peers.Peer {
	if p := f.reg.Get(v.Peer); p != nil {
		return p
	}
	if v.Addr == "" {
		return nil
	}
	for _, p := range f.reg.Peers() {
		if p.Addr() == v.Addr {
			return p
		}
	}
	return nil
}

// forget drops what was kept of a member that left.
func (f *Fleet) forget(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.views, node)
	for k := range f.suspected {
		if len(k) > len(node) && k[:len(node)] == node && k[len(node)] == 0 {
			delete(f.suspected, k)
		}
	}
}

// decryptFailures counts gossip datagrams and connections that could not
// be read (another key, or not gossip): each is a debug line, and one
// warning a minute at most sums up those of the minute before (a member
// with the wrong key says so itself, once, when its join fails; anyone
// can send datagrams or connect, so they never flood the log).
type decryptFailures struct {
	mu   sync.Mutex
	n    atomic.Int64
	last time.Time
}

func (d *decryptFailures) note(l logrus.FieldLogger) {
	d.n.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if d.last.IsZero() {
		d.last = now // the first minute's count starts now
		return
	}
	if now.Sub(d.last) >= time.Minute {
		d.last = now
		l.WithField("count", d.n.Swap(0)).Warn("fleet: gossip datagrams and connections that could not be read were dropped (another [fleet] key, or not gossip)")
	}
}
