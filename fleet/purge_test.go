package fleet

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// purgeRecorder is a member's cache as far as purges go.
type purgeRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (r *purgeRecorder) purge(key []byte) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, string(key))
	return 1
}

func (r *purgeRecorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.keys {
		if k == key {
			n++
		}
	}
	return n
}

// fleetOf starts n members on loopback, all joined, each with its own
// purge recorder.
func fleetOf(t *testing.T, n int) ([]*node, []*purgeRecorder) {
	t.Helper()
	nodes := make([]*node, n)
	recs := make([]*purgeRecorder, n)
	for i := range nodes {
		cfg := Config{Bind: "127.0.0.1:0", PurgeLog: 10 * time.Minute}
		if i > 0 {
			cfg.Join = []string{nodes[0].addr()}
		}
		nodes[i] = startNode(t, fmt.Sprintf("m%02d", i), cfg)
		recs[i] = &purgeRecorder{}
		nodes[i].f.SetPurger(recs[i].purge)
	}
	// 16 instances under the race detector on two cores take a while.
	deadline := time.Now().Add(60 * time.Second)
	for {
		all := true
		for _, nd := range nodes {
			all = all && nd.f.Members() == n
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %d members did not all see each other within 60s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nodes, recs
}

// TestPurgeReachesEveryMember: with 16 members, each of 100 purges made
// on one of them is applied once by each of the other 15 and
// acknowledged by all of them within the purge's 2 s wait.
func TestPurgeReachesEveryMember(t *testing.T) {
	if testing.Short() {
		t.Skip("16 memberlist instances")
	}
	const n = 16
	nodes, recs := fleetOf(t, n)
	var took []time.Duration
	for i := 0; i < 100; i++ {
		from := i % n
		key := fmt.Sprintf("http://origin.example/purged/%d", i)
		res, ok := nodes[from].f.Purge([]byte(key), 2*time.Second)
		if !ok || len(res.Acknowledged) != n-1 || len(res.Missing) != 0 {
			t.Fatalf("purge %d from m%02d: acknowledged by %d (%v), missing %v; want all %d others", i, from, len(res.Acknowledged), res.Acknowledged, res.Missing, n-1)
		}
		took = append(took, res.Took)
		for j, r := range recs {
			want := 1
			if j == from {
				want = 0 // the admin call purges its own cache; the fleet the others'
			}
			if got := r.count(key); got != want {
				t.Fatalf("purge %d: m%02d applied it %d times; want %d", i, j, got, want)
			}
		}
	}
	slices.Sort(took)
	p99 := took[len(took)*99/100-1]
	// How long it took is a figure to read from this log with the test
	// run alone (docs/fleet.md), not a bound to assert: beside the
	// end-to-end suite under -race, p99 reached 820 ms on a 2-core machine.
	t.Logf("100 purges over %d members: median %v, p99 %v to the last acknowledgement", n, took[len(took)/2], p99)
}

// TestPurgeLogReplayedOnRejoin: a member that was away while purges were
// made gets them when it rejoins (the state exchange), applies each once,
// and one older than purge_log is not replayed.
func TestPurgeLogReplayedOnRejoin(t *testing.T) {
	nodes, recs := fleetOf(t, 2)
	away := startNode(t, "away", Config{Bind: "127.0.0.1:0", PurgeLog: 10 * time.Minute})
	rec := &purgeRecorder{}
	away.f.SetPurger(rec.purge)
	// Purges made while "away" is not a member.
	for i := 0; i < 3; i++ {
		if _, ok := nodes[0].f.Purge(fmt.Appendf(nil, "http://origin.example/while-away/%d", i), time.Second); !ok {
			t.Fatal("purge refused")
		}
	}
	// One too old to be replayed, planted in the log as if made long ago.
	old := Purge{ID: "old", Node: "m00", Key: "http://origin.example/too-old", At: time.Now().Add(-time.Hour).UnixNano()}
	nodes[0].f.purges.mu.Lock()
	nodes[0].f.purges.log = append([]Purge{old}, nodes[0].f.purges.log...)
	nodes[0].f.purges.mu.Unlock()
	if recs[1].count("http://origin.example/while-away/0") != 1 {
		t.Fatal("the member that was there did not apply the purge")
	}
	if err := away.f.Apply(Config{Bind: "127.0.0.1:0", PurgeLog: 10 * time.Minute, Join: []string{nodes[0].addr()}}, "away"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the member that was away applies the purges it missed", func() bool {
		for i := 0; i < 3; i++ {
			if rec.count(fmt.Sprintf("http://origin.example/while-away/%d", i)) != 1 {
				return false
			}
		}
		return true
	})
	// Another exchange replays nothing twice.
	away.f.cur.Load().ml.Join([]string{nodes[1].addr()})
	for i := 0; i < 3; i++ {
		if c := rec.count(fmt.Sprintf("http://origin.example/while-away/%d", i)); c != 1 {
			t.Fatalf("purge %d applied %d times", i, c)
		}
	}
	if rec.count("http://origin.example/too-old") != 0 {
		t.Fatal("a purge older than purge_log was replayed")
	}
}

// TestPurgeLogBoundedInBytes: purges with the longest keys allowed, as
// many as a message may carry, cost the log at most maxLogBytes; the
// newest stay.
func TestPurgeLogBoundedInBytes(t *testing.T) {
	var ps purges
	ps.keep = time.Hour
	now := time.Now()
	key := strings.Repeat("k", maxKey)
	for i := 0; i < maxPurges; i++ {
		ps.remember(Purge{ID: fmt.Sprintf("%024d", i), Node: "flood", Key: key, At: now.UnixNano()}, now)
	}
	if ps.bytes > maxLogBytes || len(ps.seen) != len(ps.log) {
		t.Fatalf("the log holds %d bytes in %d purges (%d seen); want at most %d", ps.bytes, len(ps.log), len(ps.seen), maxLogBytes)
	}
	if last := ps.log[len(ps.log)-1].ID; last != fmt.Sprintf("%024d", maxPurges-1) {
		t.Fatalf("the newest purge kept is %s; want the last one made", last)
	}
	total := 0
	for _, p := range ps.log {
		total += purgeSize(p)
	}
	if total != ps.bytes {
		t.Fatalf("counted %d bytes; the log holds %d", ps.bytes, total)
	}
}
