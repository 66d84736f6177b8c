package peers

// This file holds the live-connect gate: while a peer is suspect for its
// connects, at most one live request at a time waits on a connect to it,
// and none while its latest connect hung, until a probe settles it.

// BeginDial claims a live connect to the peer, and reports whether the request
// may make it. A healthy peer is always dialled. A suspect one is not
// dialled while its latest connect hung (timed out, or was still pending
// past its hedge delay), nor beside another live connect while it has
// failed connects below the limit: the request goes on to its next hop,
// nothing failed, and the prober, which settles a suspect peer at once,
// decides. Without the gate every live request paid the connect timeout
// in turn until the peer reached connect_fail_limit. A true answer is
// followed by EndDial when the connect is over.
//
// A peer that is not alive is never dialled: a plan hands out a peer it
// saw alive, and a probe may find it dead before the request connects;
// a live connect then would be a live request finding out whether the
// peer is back.
func (h *Health) BeginDial() bool {
	n := h.dialing.Add(1)
	l := h.row.Load()
	if l.state != Alive || l.suspect && (h.hung.Load() || n > 1 && h.consecutive.Load() > 0) {
		h.dialing.Add(-1)
		return false
	}
	return true
}

// EndDial ends a live connect BeginDial allowed.
func (h *Health) EndDial() { h.dialing.Add(-1) }
