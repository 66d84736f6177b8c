package probes

// This file holds the probes through a parent to a destination it said
// it could not reach (peers/reach.go): a HEAD of the destination's URL,
// or a CONNECT to a tunnel's host and port, sent through the parent on a
// connection of its own. An answer that says the request never reached
// the destination again (internal/nexthop) leaves the mark, backed off;
// any other final answer — the origin's, whatever its status — clears it.
// They run in the background, at most a few a second per parent
// (peers.Health.DueDestinations), and never carry a client's request.

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus"
)

// destEvery is how often the prober looks for destinations due a probe.
const destEvery = 250 * time.Millisecond

// destTimeout bounds a destination probe's wait for its answer: the
// parent fetches from the origin (not answering itself, as for OPTIONS).
const destTimeout = 10 * time.Second

// probeDestinations starts the destination probes due now through every
// alive parent.
func (pr *Prober) probeDestinations(ctx context.Context, now time.Time) {
	for _, p := range pr.reg.Peers() {
		if p.Type() != peers.Parent || p.Health().State() != peers.Alive {
			continue
		}
		for _, dest := range p.Health().DueDestinations(now) {
			pr.wg.Add(1)
			go func() {
				defer pr.wg.Done()
				reached, err := pr.destProbe(ctx, p, dest)
				if ctx.Err() != nil {
					return
				}
				o := peers.Outcome{Event: peers.DestProbed, Dest: dest, At: time.Now()}
				if !reached {
					o.Class = peers.AnswerClosed
					pr.log.WithFields(logrus.Fields{"peer": p.Name(), "destination": dest, "err": fmt.Sprint(err)}).Debug("destination probe: not reached")
				}
				pr.reg.Observe(p, o)
			}()
		}
	}
}

// destProbe asks dest through p and reports whether the request reached
// it.
func (pr *Prober) destProbe(ctx context.Context, p *peers.Peer, dest string) (bool, error) {
	req, ok := destRequest(dest, p.Login())
	if !ok {
		return true, nil // nothing to ask: the mark goes
	}
	conn, err := pr.dialer.DialPeer(ctx, p, dialer.Probe, 0)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	start := time.Now()
	status, said, err := exchangeProbe(pr.stalls.Conn(conn, start, max(destTimeout, p.ProbeTimeout())), req)
	switch {
	case err != nil:
		return false, err
	case said.Unreached:
		return false, fmt.Errorf("answered %d: %s", status, said.Why)
	}
	return true, nil
}

// destRequest is a probe's request for dest through a parent with login:
// a HEAD of the destination's URL ("/"), or a CONNECT to a tunnel's host
// and port; ok false for a destination it cannot ask.
func destRequest(dest, login string) (string, bool) {
	var b string
	if u, err := url.Parse(dest); err == nil && u.Scheme != "" && u.Host != "" && u.Opaque == "" {
		b = "HEAD " + u.Scheme + "://" + u.Host + "/ HTTP/1.1\r\nHost: " + u.Host + "\r\n"
	} else if _, _, err := net.SplitHostPort(dest); err == nil {
		b = "CONNECT " + dest + " HTTP/1.1\r\nHost: " + dest + "\r\n"
	} else {
		return "", false
	}
	if login != "" && login != "PASS" {
		b += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(login)) + "\r\n"
	}
	return b + "User-Agent: peerd-probe\r\nConnection: close\r\n\r\n", true
}
