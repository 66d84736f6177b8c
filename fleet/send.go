package fleet

// This file holds how a member sends its messages: verdicts queued for
// gossip, deaths sent to every member at once, and the bounded broadcast
// queue.

import "github.com/sirupsen/logrus"

// queueVerdict broadcasts one of this member's verdicts, signed.
func (m *member) queueVerdict(v Verdict) {
	v.Node = m.node
	b, err := m.seal([]Verdict{v})
	if err != nil {
		return
	}
	m.queueRaw(v.Node+"/"+v.Peer, b)
}

// sendNow sends a death to every member at once, besides queueing it:
// the gossip interval (100-200 ms) is long next to the rate at which the
// other members would send client requests to a dead parent.
func (m *member) sendNow(v Verdict) {
	if m.ml == nil {
		return
	}
	v.Node = m.node
	b, err := m.seal([]Verdict{v})
	if err != nil {
		return
	}
	for _, n := range m.f.shared.others(m.node) {
		if err := m.ml.SendBestEffort(n, b); err != nil {
			m.f.log.WithFields(logrus.Fields{"node": n.Name, "err": err.Error()}).Debug("fleet: direct send failed")
		}
	}
}

// queueRaw broadcasts a signed message as it is (a relayed one keeps its
// sender's signature). The queue is bounded: past maxQueued the oldest
// messages are dropped, so a flood cannot grow it.
func (m *member) queueRaw(name string, b []byte) {
	m.queue.QueueBroadcast(&broadcast{name: name, msg: b})
	if m.queue.NumQueued() > maxQueued {
		m.queue.Prune(maxQueued)
	}
}

// maxQueued bounds the broadcast queue.
const maxQueued = 1024
