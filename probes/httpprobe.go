package probes

// This file holds the HTTP probe: how a parent dead by answer failures
// (or suspected of answering badly) is probed. A TCP connect says nothing
// of a parent that accepts but does not answer, so this probe asks the
// parent itself something it answers without forwarding — OPTIONS or
// TRACE with Max-Forwards: 0 (RFC 9110 7.6.2; Squid answers both as
// HIER_NONE) — or GETs a configured URL through it. A complete head, not
// 502/503/504, within the deadline the registry gives is a good probe.

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/internal/nexthop"
	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus"
)

// httpProbe runs one HTTP probe of p and reports it to the registry. The
// connect itself is reported by the dialer (it never revives a parent
// dead by answers).
func (pr *Prober) httpProbe(ctx context.Context, p *peers.Peer) error {
	conn, err := pr.dialer.DialPeer(ctx, p, dialer.Probe, 0)
	if err != nil {
		pr.log.WithFields(logrus.Fields{"peer": p.Name(), "err": err.Error()}).Debug("http probe: connect failed")
		return err
	}
	defer conn.Close()
	deadline := pr.reg.HTTPProbeTimeout(p)
	start := time.Now()
	// Its reads stretch by peerd's own stalls (stall_guard): a parent is
	// blamed for a timeout only when it had all of it.
	status, said, err := exchangeProbe(pr.stalls.Conn(conn, start, deadline), probeRequest(pr.reg.Health().HTTPProbe, p))
	now := time.Now()
	elapsed := now.Sub(start) - pr.stalls.Stalled(start, now) // peerd's own stall is not the parent's time
	// A peerd parent says in its answer whether it has a usable next
	// hop of its own.
	o := peers.Outcome{Event: peers.HTTPProbed, At: now, NoNextHop: said.NoNextHop}
	switch bound := p.Health().OutlierBound(); {
	case err != nil:
		o.Class = probeClass(err)
	case status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout:
		err = fmt.Errorf("answered %d", status)
		o.Class = peers.AnswerOwn5xx
	case elapsed > deadline:
		err = fmt.Errorf("answered after %s, past its first-byte timeout %s", elapsed.Round(time.Millisecond), deadline)
		o.Class = peers.AnswerLate
	case bound > 0 && elapsed > bound:
		// An outlier: answered, but still too slow beside its peers.
		err = fmt.Errorf("answered after %s, still over outlier_factor x its peers' (%s)", elapsed.Round(time.Millisecond/10), bound.Round(time.Millisecond/10))
		o.Class = peers.AnswerLate
	default:
		pr.reg.Observe(p, o) // AnswerOK: a good probe
		return nil
	}
	o.Err = err
	pr.reg.Observe(p, o)
	pr.log.WithFields(logrus.Fields{"peer": p.Name(), "err": err.Error()}).Debug("http probe failed")
	return err
}

// probeRequest is the probe's request head for p.
func probeRequest(h peers.HTTPProbe, p *peers.Peer) string {
	target, host := "http://"+p.Addr()+"/", p.Addr()
	if h.Method == http.MethodGet {
		target = h.URL
		if u, err := url.Parse(h.URL); err == nil {
			host = u.Host
		}
	}
	b := h.Method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n"
	if h.Method != http.MethodGet {
		b += "Max-Forwards: 0\r\n"
	}
	if login := p.Login(); login != "" && login != "PASS" {
		b += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(login)) + "\r\n"
	}
	return b + "User-Agent: peerd-probe\r\nConnection: close\r\n\r\n"
}

// exchangeProbe writes the request and reads the response head: its
// status and what it says of the peer's own next hop.
func exchangeProbe(conn net.Conn, req string) (int, nexthop.Said, error) {
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, nexthop.Said{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, nexthop.Said{}, err
	}
	resp.Body.Close()
	return resp.StatusCode, nexthop.Read(answerOf(resp.Header)), nil
}

// answerOf is what internal/nexthop reads of an answer's header.
func answerOf(h http.Header) nexthop.Answer {
	a := nexthop.Answer{SquidError: []byte(h.Get("X-Squid-Error")), PeerdError: []byte(h.Get("X-Peerd-Error"))}
	for _, v := range h.Values("Proxy-Status") {
		a.ProxyStatus = append(a.ProxyStatus, []byte(v))
	}
	return a
}

// probeClass is the answer-failure class of a probe that got no head.
func probeClass(err error) peers.AnswerClass {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, os.ErrDeadlineExceeded):
		return peers.AnswerTimeout
	case errors.Is(err, syscall.ECONNRESET):
		return peers.AnswerReset
	}
	return peers.AnswerClosed
}
