package peers

// This file holds fleet members as next hops (contract section 20): a
// member that owns a cache key is asked for it as a proxy, through the
// same dialer, pools and walk as a peer. A member is not in the registry:
// memberlist decides whether it is there, and the fleet whether it is to
// be asked; so the registry counts nothing against it, and no probe or
// state change ever touches it.

import "time"

// NewMember is a next hop for the fleet member node, reached at
// host:port within connectTimeout.
func NewMember(node, host string, port int, connectTimeout time.Duration) *Peer {
	spec := Spec{Name: node, Host: host, Port: port, Type: Sibling}.WithDefaults()
	s := resolve(Options{ConnectTimeout: connectTimeout}, spec, Sibling)
	s.member = true
	p := newPeer(s)
	p.health.row.Store(&row{Name: node, Peer: p, liveness: liveness{state: Alive}})
	return p
}
