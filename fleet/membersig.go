package fleet

// This file holds the trust of a member request (contract section 20):
// the Peerd-Fleet-Member field a member's request to a key's owner
// carries, and its check at the owner. The signature binds the request to
// its sender, its one recipient, its time (within a few seconds), a nonce
// the recipient accepts once, and what changes the answer (method,
// target, Host, Cache-Control, Range: forwarding's binding). A member
// request skips [proxy] allow, the rules and [auth] at the owner, so a
// captured field must be of no use elsewhere, later, again, or from
// another address: the owner accepts it only from an address the sender
// published.

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// sigWindow is how far a member request's time may be from ours: the
	// clock skew of machines kept by NTP, and the request's way there.
	sigWindow = 5 * time.Second
	// maxNonces bounds the nonces remembered (those of the last two
	// windows); past it, member requests are refused until some expire.
	maxNonces = 1 << 16
)

// nonces are the member-request nonces seen within the window.
type nonces struct {
	mu   sync.Mutex
	seen map[string]time.Time // nonce -> when it may be forgotten
}

// first reports whether nonce is new, remembering it until until.
func (n *nonces) first(nonce string, now, until time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.seen = map[string]time.Time{}
	}
	if _, dup := n.seen[nonce]; dup {
		return false
	}
	if len(n.seen) >= maxNonces {
		n.seen = pruneUntil(n.seen, now)
		if len(n.seen) >= maxNonces {
			return false
		}
	}
	n.seen[nonce] = until
	return true
}

// Sign is the value of the field a request to the owner to carries
// (Peerd-Fleet-Member, written by forwarding): this member's name, the
// recipient, the time, a nonce, and its signature over those and binding.
func (f *Fleet) Sign(to string, binding []byte) []byte {
	m := f.cur.Load()
	if m == nil {
		return nil
	}
	var nb [12]byte
	rand.Read(nb[:])
	ts := strconv.FormatInt(m.clock().UnixMilli(), 10)
	nonce := base64.RawURLEncoding.EncodeToString(nb[:])
	sig := ed25519.Sign(m.priv, memberSigned(m.node, to, ts, nonce, binding))
	return []byte(m.node + " " + to + " " + ts + " " + nonce + " " + base64.RawStdEncoding.EncodeToString(sig))
}

// Verify checks a request's Peerd-Fleet-Member field, from the address
// from: signed by another current member of this fleet for this one,
// over this binding, within sigWindow, with a nonce not seen before, and
// sent from an address that member published. It returns the member.
func (f *Fleet) Verify(value, binding []byte, from netip.Addr) (string, bool) {
	m := f.cur.Load()
	if m == nil {
		return "", false
	}
	parts := strings.Fields(string(value))
	if len(parts) != 5 || parts[0] == m.node || parts[1] != m.node {
		return "", false
	}
	ms, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return "", false
	}
	now := m.clock()
	if d := now.Sub(time.UnixMilli(ms)); d > sigWindow || d < -sigWindow {
		return "", false
	}
	sig, err := base64.RawStdEncoding.DecodeString(parts[4])
	pub := m.publicKey(parts[0])
	if err != nil || pub == nil || !ed25519.Verify(pub, memberSigned(parts[0], parts[1], parts[2], parts[3], binding), sig) {
		return "", false
	}
	if !f.publishedBy(m, parts[0], from) {
		return "", false
	}
	// Last, once everything else holds: a nonce is spent only by a
	// request that would have been accepted.
	if !f.nonces.first(parts[3], now, now.Add(2*sigWindow)) {
		return "", false
	}
	return parts[0], true
}

// publishedBy reports whether addr is an address node published: the
// host of its gossip address or of its proxy address.
func (f *Fleet) publishedBy(m *member, node string, addr netip.Addr) bool {
	var addrs []netip.Addr
	if m.addrsOf != nil {
		addrs = m.addrsOf(node)
	} else {
		addrs = f.shared.addrsOf(node)
	}
	for _, a := range addrs {
		if a.Unmap() == addr.Unmap() {
			return true
		}
	}
	return false
}

// addrsOf is what node published, as memberlist told of it.
func (s *shared) addrsOf(node string) []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	mi, ok := s.members[node]
	if !ok {
		return nil
	}
	var out []netip.Addr
	if a, ok := netip.AddrFromSlice(mi.node.Addr); ok {
		out = append(out, a)
	}
	if host, _, err := net.SplitHostPort(mi.meta.HTTP); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func memberSigned(node, to, ts, nonce string, binding []byte) []byte {
	b := make([]byte, 0, 24+len(node)+len(to)+len(ts)+len(nonce)+len(binding))
	b = append(b, "peerd-owner-2\x00"...)
	for _, s := range []string{node, to, ts, nonce} {
		b = append(append(b, s...), 0)
	}
	return append(b, binding...)
}
