package dialer

// This file holds the local address outgoing connections are made from
// ([proxy] outgoing_address, Squid tcp_outgoing_address).

import (
	"net"
	"net/netip"
	"sync/atomic"
)

// Source is the local address connections to peers and origins are made
// from. The zero Source, or an invalid address set, leaves the choice to
// the kernel; an address of the other family than the destination's is
// not used for it (Squid does the same). Safe for concurrent use; a
// reload sets it.
type Source struct {
	addr atomic.Pointer[netip.Addr]
}

// Set changes the address; the zero Addr clears it.
func (s *Source) Set(a netip.Addr) { s.addr.Store(&a) }

// For returns a net.Dialer that connects to dst from the address, when it
// is of dst's family. A nil Source gives a plain net.Dialer.
func (s *Source) For(dst netip.Addr) net.Dialer {
	var d net.Dialer
	if s == nil {
		return d
	}
	if a := s.addr.Load(); a != nil && a.IsValid() && a.Is4() == dst.Unmap().Is4() {
		d.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
	}
	return d
}
