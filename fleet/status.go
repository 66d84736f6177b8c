package fleet

// This file holds the fleet as GET /fleet shows it: the members, their
// state and the verdicts heard.

import (
	"sort"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// Status is GET /fleet.
type Status struct {
	Enabled bool     `json:"enabled"`
	Node    string   `json:"node,omitempty"`
	Members []Member `json:"members"`
	// Peers is each member's view of each peer: peer name, then node,
	// then state. This member's view is read live from the registry.
	Peers map[string]map[string]string `json:"peers"`
	// Purges are this member's fleet purges (purge.go).
	Purges PurgeCounts `json:"purges"`
	// SharedCache says whether the members share their caches; the
	// counters are this member's (shared.go).
	SharedCache bool `json:"shared_cache"`
	OwnerCounts
}

// Member is one member of the fleet as memberlist sees it.
type Member struct {
	Node  string `json:"node"`
	Addr  string `json:"addr"`
	State string `json:"state"`
	// Proxy is the proxy address the member publishes for owner
	// requests: "" while it owns no keys (not serving yet, draining).
	Proxy string `json:"proxy"`
}

// Status returns the fleet as this member sees it.
func (f *Fleet) Status() Status {
	st := Status{Members: []Member{}, Peers: map[string]map[string]string{}}
	m := f.cur.Load()
	if m == nil {
		return st
	}
	st.Enabled, st.Node = true, m.node
	st.Purges = f.purgeCounts()
	st.SharedCache, st.OwnerCounts = f.shared.on.Load(), f.OwnerCounts()
	live := map[string]bool{m.node: true}
	st.Members = append(st.Members, Member{Node: m.node, Addr: m.selfAddr, State: "alive", Proxy: m.advertised()})
	for _, n := range f.shared.others(m.node) {
		_, mt := decodeMeta(n.Meta)
		st.Members = append(st.Members, Member{Node: n.Name, Addr: n.Address(), State: nodeState(n.State), Proxy: mt.HTTP})
		live[n.Name] = true
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].Node < st.Members[j].Node })
	for _, p := range f.reg.Peers() {
		st.Peers[p.Name()] = map[string]string{m.node: stateOf(p)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for node, view := range f.views {
		if !live[node] {
			continue
		}
		for peer, v := range view {
			if st.Peers[peer] == nil {
				st.Peers[peer] = map[string]string{}
			}
			st.Peers[peer][node] = v.State
		}
	}
	return st
}

func nodeState(s memberlist.NodeStateType) string {
	switch s {
	case memberlist.StateAlive:
		return "alive"
	case memberlist.StateSuspect:
		return "suspect"
	case memberlist.StateDead:
		return "dead"
	case memberlist.StateLeft:
		return "left"
	}
	return strconv.Itoa(int(s))
}
