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
}

const (
	wireVersion = 1
	maxField    = 256
	maxVerdicts = 4096
)

func encode(vs []Verdict) ([]byte, error) { return json.Marshal(message{V: wireVersion, Verdicts: vs}) }

// decode parses a message from another member. Anything malformed is an
// error and the whole message is dropped: gossip is authenticated, but a
// member of another version or a bug must not plant a half-read verdict.
func decode(b []byte) ([]Verdict, error) {
	if len(b) == 0 {
		return nil, errors.New("empty message")
	}
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("not a fleet message: %v", err)
	}
	if m.V != wireVersion {
		return nil, fmt.Errorf("fleet message version %d; this member speaks %d", m.V, wireVersion)
	}
	if len(m.Verdicts) > maxVerdicts {
		return nil, fmt.Errorf("%d verdicts in one message; at most %d", len(m.Verdicts), maxVerdicts)
	}
	for i, v := range m.Verdicts {
		if err := v.check(); err != nil {
			return nil, fmt.Errorf("verdict %d: %v", i, err)
		}
	}
	return m.Verdicts, nil
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
