package fleet

// This file holds the fleet's messages: verdicts and their encoding.

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Verdict is one member's view of one peer, as gossiped.
type Verdict struct {
	Node  string `json:"node"`  // the member whose verdict it is
	Peer  string `json:"peer"`  // the peer's name
	Addr  string `json:"addr"`  // the peer's host:port as that member dials it
	State string `json:"state"` // alive, dead, suspect or unknown
	At    int64  `json:"at"`    // when the state changed, Unix ns on that member's clock (increasing per member)
	// Cause of a death: "connect" or "answer" (the parent accepts
	// connections but its answers failed; probed over HTTP).
	Cause string `json:"cause,omitempty"`
}

// message is the wire form of a gossip message or a state exchange.
type message struct {
	V        int       `json:"v"`
	Verdicts []Verdict `json:"verdicts"`
	// Purges are cache purges to apply (purge.go); Acks the IDs of
	// purges the sender applied.
	Purges []Purge  `json:"purges,omitempty"`
	Acks   []string `json:"acks,omitempty"`
}

const (
	wireVersion = 1
	maxField    = 256
	maxVerdicts = 4096
)

func encode(vs []Verdict) ([]byte, error) { return encodeMsg(message{Verdicts: vs}) }

func encodeMsg(m message) ([]byte, error) {
	m.V = wireVersion
	if m.Verdicts == nil {
		m.Verdicts = []Verdict{}
	}
	return json.Marshal(m)
}

// decode parses a message from another member and returns its verdicts.
func decode(b []byte) ([]Verdict, error) {
	m, err := decodeMsg(b)
	return m.Verdicts, err
}

// decodeMsg parses a message from another member. Anything malformed is
// an error and the whole message is dropped: gossip is authenticated, but
// a member of another version or a bug must not plant a half-read
// verdict or purge.
func decodeMsg(b []byte) (message, error) {
	if len(b) == 0 {
		return message{}, errors.New("empty message")
	}
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		return message{}, fmt.Errorf("not a fleet message: %v", err)
	}
	if m.V != wireVersion {
		return message{}, fmt.Errorf("fleet message version %d; this member speaks %d", m.V, wireVersion)
	}
	if len(m.Verdicts) > maxVerdicts {
		return message{}, fmt.Errorf("%d verdicts in one message; at most %d", len(m.Verdicts), maxVerdicts)
	}
	for i, v := range m.Verdicts {
		if err := v.check(); err != nil {
			return message{}, fmt.Errorf("verdict %d: %v", i, err)
		}
	}
	if len(m.Purges) > maxPurges || len(m.Acks) > maxPurges {
		return message{}, fmt.Errorf("%d purges and %d acknowledgements in one message; at most %d each", len(m.Purges), len(m.Acks), maxPurges)
	}
	for i, p := range m.Purges {
		if err := p.check(); err != nil {
			return message{}, fmt.Errorf("purge %d: %v", i, err)
		}
	}
	for i, a := range m.Acks {
		if a == "" || len(a) > maxField || !utf8.ValidString(a) {
			return message{}, fmt.Errorf("acknowledgement %d: bad purge id", i)
		}
	}
	return m, nil
}

func (v Verdict) check() error {
	for _, f := range [...]struct{ name, val string }{{"node", v.Node}, {"peer", v.Peer}, {"addr", v.Addr}} {
		if f.val == "" && f.name != "addr" {
			return fmt.Errorf("no %s", f.name)
		}
		if len(f.val) > maxField || !utf8.ValidString(f.val) {
			return fmt.Errorf("bad %s", f.name)
		}
	}
	switch v.State {
	case StateAlive, StateDead, StateSuspect, StateUnknown:
	default:
		return fmt.Errorf("unknown state %q", v.State)
	}
	if v.At <= 0 {
		return errors.New("no time")
	}
	switch v.Cause {
	case "", "connect", "answer":
	default:
		return fmt.Errorf("unknown cause %q", v.Cause)
	}
	return nil
}
