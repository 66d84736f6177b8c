package squidimport

// This file holds cache_peer: a [[peer]] table per line, its options, the
// names made unique, and the [selection] policy its options imply.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// cachePeer reads "cache_peer HOST TYPE HTTP-PORT ICP-PORT [OPTIONS]".
func (s *squidImport) cachePeer(n int, w []string) error {
	if len(w) < 4 {
		return fmt.Errorf("cache_peer needs a host, a type, an http port and an icp port")
	}
	p := squidPeer{line: n, host: w[0], typ: w[1], weight: 1}
	switch p.typ {
	case "parent", "sibling":
	case "multicast":
		return fmt.Errorf("cache_peer %s is a multicast ICP group: peerd has no multicast peers", p.host)
	default:
		return fmt.Errorf("cache_peer %s: unknown type %q (want parent or sibling)", p.host, p.typ)
	}
	var err error
	if p.port, err = strconv.Atoi(w[2]); err != nil || p.port < 1 || p.port > 65535 {
		return fmt.Errorf("cache_peer %s: http port %q is not a port", p.host, w[2])
	}
	if p.icpPort, err = strconv.Atoi(w[3]); err != nil || p.icpPort < 0 || p.icpPort > 65535 {
		return fmt.Errorf("cache_peer %s: icp port %q is not a port", p.host, w[3])
	}
	if strings.ContainsAny(p.host, "/ \"") || p.host == "" {
		return fmt.Errorf("cache_peer %q is not a host name or address", p.host)
	}
	for _, o := range w[4:] {
		key, val, hasVal := strings.Cut(o, "=")
		num := func() (int, error) {
			v, err := strconv.Atoi(val)
			if err != nil || v < 0 {
				return 0, fmt.Errorf("cache_peer %s: %s=%q is not a number", p.host, key, val)
			}
			return v, nil
		}
		switch {
		case key == "name" && hasVal:
			p.name = val
		case key == "weight" && hasVal:
			if p.weight, err = num(); err != nil {
				return err
			}
			if p.weight < 1 {
				p.weight = 1
			}
		case key == "connect-fail-limit" && hasVal:
			if p.failLimit, err = num(); err != nil {
				return err
			}
		case key == "max-conn" && hasVal:
			if p.maxConn, err = num(); err != nil {
				return err
			}
		case key == "connect-timeout" && hasVal:
			d, err := squidDuration([]string{val})
			if err != nil {
				return fmt.Errorf("cache_peer %s: connect-timeout: %v", p.host, err)
			}
			p.connectTimeout = d
		case key == "login" && hasVal:
			if val == "PASS" || val == "PASSTHRU" {
				// The client's own credentials, to this peer. peerd's PASS
				// sends the client's Proxy-Authorization as it came, which
				// is Squid's PASSTHRU too (Authorization always passes).
				p.login = "PASS"
				continue
			}
			if !strings.Contains(val, ":") || strings.HasPrefix(val, "*") {
				s.note(n, "cache_peer %s login=%s (peerd sends a fixed user:pass or PASS only)", p.host, val)
				continue
			}
			p.login = val
		case (key == "tls" || key == "ssl") && !hasVal:
			p.tls = true
		case (key == "tls-cafile" || key == "sslcafile") && hasVal:
			p.tlsCA = val
		case (key == "tls-domain" || key == "ssldomain") && hasVal:
			p.tlsName = val
		case (key == "tls-cert" || key == "sslcert") && hasVal:
			p.tlsCert = val
		case (key == "tls-key" || key == "sslkey") && hasVal:
			p.tlsKey = val
		case key == "default" && !hasVal:
			p.isDefault = true
		case key == "round-robin":
			p.rr = true
		case key == "weighted-round-robin":
			p.wrr = true
		case key == "carp":
			p.carp = true
		case key == "sourcehash":
			p.hash = true
		case key == "no-query":
			p.noQuery = true
		case key == "proxy-only":
			p.proxyOnly = true
		case key == "no-digest", key == "no-netdb-exchange", key == "no-delay":
			// Nothing to carry over: peerd has no digests, netdb or delay pools.
		case key == "originserver":
			return fmt.Errorf("cache_peer %s is an originserver (a reverse-proxy backend): peerd is a forward proxy and has no equivalent", p.host)
		default:
			s.note(n, "cache_peer %s option %s", p.host, o)
		}
	}
	if p.noQuery {
		p.icpPort = 0 // no-query: never asked by ICP
	}
	s.peers = append(s.peers, p)
	return nil
}

func (s *squidImport) uniqueNames() error {
	seen := map[string]int{}
	for i := range s.peers {
		p := &s.peers[i]
		if p.name == "" {
			p.name = p.host
		}
		if prev, ok := seen[p.name]; ok {
			return fmt.Errorf("%s: cache_peer name %q is already used on %s (give it name=)", s.where(p.line), p.name, s.where(prev))
		}
		seen[p.name] = p.line
	}
	return nil
}

// policy is what the parents' selection options add up to. Squid's
// round-robin honours weight= (it orders parents by use count over weight),
// so unequal weights are peerd's weighted-round-robin; Squid's
// weighted-round-robin weighs by ICP RTT, which peerd does not measure.
func (s *squidImport) policy() string {
	counts := map[string]int{}
	weights := map[int]bool{}
	for _, p := range s.peers {
		if p.typ != "parent" {
			continue
		}
		switch {
		case p.carp:
			counts["carp"]++
		case p.hash:
			counts["sourcehash"]++
		case p.rr:
			counts["round-robin"]++
			weights[p.weight] = true
		case p.wrr:
			counts["weighted-round-robin"]++
			weights[p.weight] = true
		}
	}
	if len(counts) == 0 {
		return "first-up"
	}
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if counts[names[i]] != counts[names[j]] {
			return counts[names[i]] > counts[names[j]]
		}
		return names[i] < names[j]
	})
	pick := names[0]
	if len(names) > 1 {
		s.note(0, "parents mix selection options (%s): peerd uses one policy for all parents, %s", strings.Join(names, ", "), pick)
	}
	s.fileSays = pick
	switch pick {
	case "weighted-round-robin":
		// Squid weighs by ICP round-trip time; peerd has no RTT weighting.
		if len(weights) <= 1 {
			s.note(0, "squid.conf's parents are weighted-round-robin, which Squid weighs by ICP round-trip time; peerd has no RTT weighting, and with equal weight= the policy is round-robin")
			return "round-robin"
		}
		s.note(0, "squid.conf's parents are weighted-round-robin, which Squid weighs by ICP round-trip time; peerd has no RTT weighting: the policy is weighted-round-robin by their weight=")
		return "weighted-round-robin"
	case "round-robin":
		if len(weights) > 1 {
			s.say("squid.conf's parents are round-robin with unequal weight=, which Squid honours (use count over weight): peerd's weighted-round-robin")
			return "weighted-round-robin"
		}
	}
	return pick
}
