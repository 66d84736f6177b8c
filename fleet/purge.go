package fleet

// This file holds purge everywhere (contract section 20): a purge made on
// one member is sent straight to every live member (memberlist's TCP
// stream, encrypted with the fleet key and signed by the member), which
// applies it and acknowledges it the same way; it is also broadcast, and
// kept for purge_log, so a member that was away gets it in the state
// exchange when it rejoins (memberlist push/pull). A purge is applied once
// per member (by its ID); one replayed to a member that was away removes
// what it has of the key, even a copy it stored after the purge was made
// (at most one more fetch of that object).

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Purge is one purge of a cache key, as the fleet carries it.
type Purge struct {
	ID   string `json:"id"`   // random, unique per purge
	Node string `json:"node"` // the member it was made on
	Key  string `json:"key"`  // the cache key (scheme://host[:port]/path?query)
	At   int64  `json:"at"`   // when, Unix ns on that member's clock
}

const (
	maxPurges = 4096
	maxKey    = 16 << 10
	// maxLogBytes bounds the purge log in bytes (purgeSize): a member that
	// floods purges with long keys costs each other member at most this,
	// not maxPurges × maxKey (64 MiB). 4,096 purges of 100-byte URLs fit.
	maxLogBytes = 1 << 20
)

func (p Purge) check() error {
	switch {
	case p.ID == "" || len(p.ID) > maxField || !utf8.ValidString(p.ID):
		return errors.New("bad id")
	case p.Node == "" || len(p.Node) > maxField || !utf8.ValidString(p.Node):
		return errors.New("bad node")
	case p.Key == "" || len(p.Key) > maxKey:
		return errors.New("bad key")
	case p.At <= 0:
		return errors.New("no time")
	}
	return nil
}

// PurgeFunc removes what is stored for a cache key, returning how many
// variants went.
type PurgeFunc func(key []byte) int

// purges is what a Fleet keeps of purges: the log replayed to members
// that rejoin, the IDs applied, and the purges waiting for
// acknowledgements.
type purges struct {
	mu      sync.Mutex
	apply   PurgeFunc
	keep    time.Duration       // purge_log
	log     []Purge             // oldest first
	bytes   int                 // what log holds, by purgeSize
	seen    map[string]struct{} // the IDs in log
	waiting map[string]chan string
	// counts per member: purges it made, and purges of others it applied.
	made, applied int64
	seconds       prometheus.Histogram
}

// SetPurger gives the fleet the cache the other members' purges apply
// to (how long they are kept is [fleet] purge_log, from Apply).
func (f *Fleet) SetPurger(apply PurgeFunc) {
	f.purges.mu.Lock()
	defer f.purges.mu.Unlock()
	f.purges.apply = apply
}

// PurgeResult is what a fleet-wide purge got: the members that
// acknowledged it, those that did not in time, and how long the last
// acknowledgement took.
type PurgeResult struct {
	Acknowledged []string      `json:"acknowledged"`
	Missing      []string      `json:"missing"`
	Took         time.Duration `json:"-"`
}

// Purge sends the purge of key (already applied here) to every live
// member and waits up to wait for their acknowledgements. Off, it does
// nothing and returns ok false.
func (f *Fleet) Purge(key []byte, wait time.Duration) (PurgeResult, bool) {
	m := f.cur.Load()
	if m == nil || m.ml == nil {
		return PurgeResult{}, false
	}
	start := time.Now()
	var id [12]byte
	rand.Read(id[:])
	p := Purge{ID: hex.EncodeToString(id[:]), Node: m.node, Key: string(key), At: m.clock().UnixNano()}
	acks := make(chan string, 64)
	f.purges.mu.Lock()
	f.purges.remember(p, start)
	f.purges.made++
	if f.purges.waiting == nil {
		f.purges.waiting = map[string]chan string{}
	}
	f.purges.waiting[p.ID] = acks
	f.purges.mu.Unlock()
	defer func() {
		f.purges.mu.Lock()
		delete(f.purges.waiting, p.ID)
		f.purges.mu.Unlock()
	}()
	b, err := m.sealMsg(message{Purges: []Purge{p}})
	res := PurgeResult{Acknowledged: []string{}, Missing: []string{}}
	if err != nil {
		return res, true
	}
	pending := map[string]bool{}
	for _, n := range m.f.shared.others(m.node) {
		pending[n.Name] = true
		go func() {
			if err := m.ml.SendReliable(n, b); err != nil {
				f.log.WithFields(logrus.Fields{"node": n.Name, "err": err.Error()}).Debug("fleet: purge not sent")
			}
		}()
	}
	if len(b) <= 1200 { // gossip datagrams: for members the direct send missed
		m.queueRaw("purge/"+p.ID, b)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(pending) > 0 {
		select {
		case node := <-acks:
			if pending[node] {
				delete(pending, node)
				res.Acknowledged = append(res.Acknowledged, node)
				res.Took = time.Since(start)
			}
		case <-timer.C:
			for n := range pending {
				res.Missing = append(res.Missing, n)
			}
			sort.Strings(res.Missing)
			sort.Strings(res.Acknowledged)
			return res, true
		}
	}
	sort.Strings(res.Acknowledged)
	if len(res.Acknowledged) > 0 {
		f.purges.seconds.Observe(res.Took.Seconds())
	}
	return res, true
}

// receivePurges applies purges from another member (sent to it, gossiped,
// or replayed in a state exchange), once each, and acknowledges them to
// the member that made each one.
func (f *Fleet) receivePurges(m *member, ps []Purge) {
	now := m.clock()
	var ack []Purge
	f.purges.mu.Lock()
	apply := f.purges.apply
	var todo []Purge
	for _, p := range ps {
		if p.Node == m.node {
			continue // our own, back
		}
		if _, seen := f.purges.seen[p.ID]; seen {
			ack = append(ack, p) // a resend: acknowledged again
			continue
		}
		if f.purges.keep > 0 && now.Sub(time.Unix(0, p.At)) > f.purges.keep+maxSkew {
			continue // older than purge_log: forgotten everywhere
		}
		f.purges.remember(p, now)
		f.purges.applied++
		todo = append(todo, p)
		ack = append(ack, p)
	}
	f.purges.mu.Unlock()
	for _, p := range todo {
		if apply != nil {
			n := apply([]byte(p.Key))
			f.log.WithFields(logrus.Fields{"key": p.Key, "from": p.Node, "purged": n}).Debug("fleet: purge applied")
		}
	}
	byNode := map[string][]string{}
	for _, p := range ack {
		byNode[p.Node] = append(byNode[p.Node], p.ID)
	}
	for node, ids := range byNode {
		go m.ackTo(node, ids)
	}
}

// ackTo acknowledges purges to the member that made them.
func (m *member) ackTo(node string, ids []string) {
	if m.ml == nil {
		return
	}
	b, err := m.sealMsg(message{Acks: ids})
	if err != nil {
		return
	}
	for _, n := range m.f.shared.others(m.node) {
		if n.Name == node {
			if err := m.ml.SendReliable(n, b); err != nil {
				m.f.log.WithFields(logrus.Fields{"node": node, "err": err.Error()}).Debug("fleet: purge acknowledgement not sent")
			}
			return
		}
	}
}

// receiveAcks hands acknowledgements to the purges waiting for them.
func (f *Fleet) receiveAcks(from string, ids []string) {
	f.purges.mu.Lock()
	defer f.purges.mu.Unlock()
	for _, id := range ids {
		if ch := f.purges.waiting[id]; ch != nil {
			select {
			case ch <- from:
			default:
			}
		}
	}
}

// remember logs p as applied at now, and forgets what is older than
// purge_log; mu is held.
func (ps *purges) remember(p Purge, now time.Time) {
	if ps.seen == nil {
		ps.seen = map[string]struct{}{}
	}
	ps.seen[p.ID] = struct{}{}
	ps.log = append(ps.log, p)
	ps.bytes += purgeSize(p)
	cut := now.Add(-ps.keep).UnixNano()
	i := 0
	for i < len(ps.log) && (ps.log[i].At < cut || len(ps.log)-i > maxPurges || ps.bytes > maxLogBytes) {
		delete(ps.seen, ps.log[i].ID)
		ps.bytes -= purgeSize(ps.log[i])
		i++
	}
	ps.log = ps.log[i:]
}

// purgeSize is what a purge costs the log: its strings and their keeping.
func purgeSize(p Purge) int { return len(p.ID) + len(p.Node) + len(p.Key) + 64 }

// recent is the purge log to replay to a member that rejoins.
func (ps *purges) recent() []Purge {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.keep <= 0 {
		return nil
	}
	return append([]Purge(nil), ps.log...)
}

// PurgeCounts are this member's purges for GET /fleet: made here, and
// made elsewhere and applied here.
type PurgeCounts struct {
	Made    int64 `json:"made"`
	Applied int64 `json:"applied"`
}

func (f *Fleet) purgeCounts() PurgeCounts {
	f.purges.mu.Lock()
	defer f.purges.mu.Unlock()
	return PurgeCounts{Made: f.purges.made, Applied: f.purges.applied}
}
