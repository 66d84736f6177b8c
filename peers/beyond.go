package peers

// This file holds how a parent is judged beyond its door: what its
// answers, its probes' answers and its ICP replies say of its own next
// hop. That a request never reached its destination through it marks
// that destination (reach.go), never the parent; that it has no usable
// next hop at all (peerd's no-next-hop, Squid's ICP_MISS_NOFETCH) cuts
// the parent off — alive, but sent nothing — until its probe's answer (or
// its next ICP reply, for the ICP word) says it has one again.

import "time"

// Causes of a parent cut off: its answers (and its probes' answers) said
// it, or its ICP replies did.
const (
	CauseNextHop = "next_hop"
	CauseICP     = "icp"
)

// observeNextHop judges what the parent said of its own next hop; it
// never counts against the parent.
func (h *Health) observeNextHop(o Outcome) verdict {
	if o.Detail != "" {
		h.countUpstream(o.Detail)
	}
	if h.peer.settings().typ != Parent {
		return verdict{}
	}
	l := h.row.Load()
	switch {
	case o.NoNextHop:
		// The parent as a whole: no destination is marked (it would
		// stay marked once the parent has its next hops back).
		if l.state == Alive && !l.noNextHop {
			return verdict{change: cutOff, cause: CauseNextHop, detail: "its answer says it has no usable next hop (" + o.Detail + ")"}
		}
	case o.Unreached && o.Dest != "":
		if h.reach.unreached(o.Dest, o.Detail, o.At) {
			return verdict{change: destLost, detail: destHost(o.Dest), cause: o.Detail}
		}
	}
	return verdict{}
}

// observeDestProbe judges a probe through the parent to a destination it
// could not reach: reached, the mark goes; not, the next probe is
// backed off.
func (h *Health) observeDestProbe(o Outcome) verdict {
	if o.Class != AnswerOK {
		h.reach.probed(o.Dest, o.At)
		return verdict{}
	}
	if d, ok := h.reach.clear(o.Dest); ok {
		return verdict{change: destBack, detail: d.Destination, cause: d.Cause}
	}
	return verdict{}
}

// observeICP judges an ICP reply: ICP_MISS_NOFETCH cuts an alive parent
// off; any other reply ends a cut-off the ICP word made.
func (h *Health) observeICP(o Outcome) verdict {
	l := h.row.Load()
	switch {
	case o.NoNextHop && l.state == Alive && !l.noNextHop && h.peer.settings().typ == Parent:
		return verdict{change: cutOff, cause: CauseICP, detail: "it answers ICP_MISS_NOFETCH: do not fetch through it"}
	case !o.NoNextHop && l.noNextHop && l.noNextHopBy == CauseICP:
		return verdict{change: reconnect, cause: CauseICP, detail: "it answers ICP queries without MISS_NOFETCH again"}
	}
	return verdict{}
}

// nextHopProbe judges what a good HTTP probe's answer says of the
// parent's next hop (a peerd parent says it in its Proxy-Status member):
// none, and the parent is cut off; one again, and a cut-off its answers
// made ends. ok false: the answer said nothing new.
func (h *Health) nextHopProbe(o Outcome, l *row) (verdict, bool) {
	switch {
	case l.state != Alive || h.peer.settings().typ != Parent:
	case o.NoNextHop && !l.noNextHop:
		return verdict{change: cutOff, cause: CauseNextHop, detail: "its answer to a probe says it has no usable next hop"}, true
	case !o.NoNextHop && l.noNextHop && l.noNextHopBy == CauseNextHop:
		return verdict{change: reconnect, cause: CauseProbe, detail: "its answer to a probe says it has a usable next hop again"}, true
	}
	return verdict{}, false
}

// Unreachable is the destinations the parent cannot reach, the oldest
// first.
func (h *Health) Unreachable() []Dest { return h.reach.unreachable() }

// NoNextHop reports whether the parent is cut off: it said it has no
// usable next hop, and has said nothing else since.
func (h *Health) NoNextHop() bool { return h.row.Load().noNextHop }

// destLogEvery spaces one parent's lines about destinations it cannot
// reach: a client asking for many hosts no parent reaches would make a
// line each.
const destLogEvery = 10 * time.Second

// logDestAllowed reports whether a line about a destination of the
// parent's may be logged at at, and how many were not logged since the
// last.
func (h *Health) logDestAllowed(at time.Time) (bool, int) {
	h.opsMu.Lock()
	defer h.opsMu.Unlock()
	if at.Sub(h.destLog) < destLogEvery {
		h.destMut++
		return false, 0
	}
	quiet := h.destMut
	h.destLog, h.destMut = at, 0
	return true, quiet
}
