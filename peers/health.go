package peers

// This file holds a peer's health part: its committed row (the registry's
// verdict, read lock-free) and what every connect, request, answer and
// probe to it counts; an outcome (Outcome) and the verdict the part makes
// of it (verdict), which the registry applies to the row; and how
// connects are judged: a failed one counts towards connect_fail_limit, a
// successful probe revives.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Health is one peer's health: what the registry last decided of it (its
// row: liveness, admin state, suspicion) and what judges it — its
// connects and their times, its answers and their head times, how it
// compares with its peers, the trials of a suspect peer, and what every
// request to it counts. Its counters are atomics written as outcomes
// arrive; its row changes only through the Registry, which applies the
// verdict Health makes of each outcome (Registry.Observe).
type Health struct {
	// row is the registry's committed row of the peer: the one home of
	// its liveness, published by the registry's commit (row.go).
	row atomic.Pointer[row]
	// timings are the metrics' histograms (timings.go), made from times
	// (the registry's) on first use.
	timings timingsSlot
	times   *atomic.Pointer[Timings]
	peer    *Peer
	_       cacheLinePad

	// Written by every request sent to the peer. lastUsed is in Unix
	// nanoseconds, 0 for never.
	requests atomic.Int64
	inFlight atomic.Int64
	lastUsed atomic.Int64
	_        cacheLinePad

	// Connect and probe counters. dialing counts live connects pending;
	// hung is set by a connect that timed out or was pending past its
	// hedge delay, and cleared by one that succeeded (trial.go).
	dialing         atomic.Int32
	hung            atomic.Bool
	consecutive     atomic.Int64
	connects        atomic.Int64
	connectFailures atomic.Int64
	probes          atomic.Int64
	probeFailures   atomic.Int64

	// Times in Unix nanoseconds; 0 means never.
	lastFailure atomic.Int64
	lastSuccess atomic.Int64
	nextProbe   atomic.Int64 // 0: none scheduled
	rampUntil   atomic.Int64 // slow start ends; 0: not ramping

	lastError atomic.Pointer[string]
	// reached is the address of the last successful connect.
	reached atomic.Pointer[netip.Addr]

	// Smoothed connect time and its mean deviation, float64 bits of
	// milliseconds (RFC 6298 style). Updates may race; they are statistics.
	srtt      atomic.Uint64
	rttvar    atomic.Uint64
	lastProbe atomic.Uint64 // RTT of the last successful probe, ms

	failures [failClasses]atomic.Int64 // connect failures by class
	// Answers (answers.go): consecutive failures, by class, hedges, and
	// the response-head times.
	answerConsec  atomic.Int64
	answerByClass [answerClasses]atomic.Int64
	hedged        atomic.Int64
	_             cacheLinePad
	answers       answerStats // locked by every answer
	_             cacheLinePad
	icp           ICPCounters
	// bytesSent and bytesReceived are the bytes of the requests sent to
	// the peer and of its answers relayed (peerd_peer_bytes_total).
	bytesSent, bytesReceived atomic.Int64
	// series is the last 15 minutes of requests, errors and head times.
	series series
	// recent are the head times of the last 10 s, judged against the
	// other parents' (relative.go).
	recent recentHeads
	// reach is the destinations the parent cannot reach (reach.go).
	reach reach

	// opsMu guards what operators read: history, upstream errors, deaths,
	// and the spacing of suspicion log lines.
	opsMu      sync.Mutex
	history    []Transition
	upstream   map[string]int64
	deathTimes []int64
	suspectLog time.Time // the last suspicion line logged
	suspectMut int       // suspicion changes not logged since
	destLog    time.Time // the last line about a destination logged
	destMut    int       // destination lines not logged since
}

// Event is what an Outcome reports.
type Event uint8

const (
	// Connected: a connect (a probe's, with Probe) ended: Err nil when it
	// succeeded, in RTT, to Addr.
	Connected Event = iota
	// ConnectSlow: a connect has been pending longer than its hedge delay.
	ConnectSlow
	// Answered: a request written whole was answered (Class AnswerOK,
	// with its head time FirstByte) or failed (Class), about the origin
	// whose host hashes to Origin (OriginHash; 0: not known).
	Answered
	// HeadLate: a response head is past the first-byte timeout FirstByte
	// and the request could not be hedged.
	HeadLate
	// HTTPProbed: an HTTP probe ended: Class AnswerOK when good, or how
	// it failed, with Err.
	HTTPProbed
	// Reported: another's word (Cause: the fleet, ICP) that the peer is
	// down (Detail); with Answers, that it died by its answers.
	Reported
	// NextHopFailed: the peer's answer said something of its own next
	// hop (Detail: an RFC 9209 error type, Squid's error id, no-peers):
	// with Unreached, that the request for Dest never reached it; with
	// NoNextHop, that the peer has no usable next hop at all. It never
	// counts against the peer.
	NextHopFailed
	// Hedged: a request of the peer's was also sent to another hop.
	Hedged
	// DestProbed: a probe through the parent to Dest reached it (Class
	// AnswerOK) or did not.
	DestProbed
	// ICPReplied: the peer answered an ICP query; with NoNextHop, it was
	// ICP_MISS_NOFETCH ("do not fetch through me").
	ICPReplied
)

// Outcome is one thing a peer did, with time as data: what the registry
// hears (Registry.Observe) and the peer's health judges.
type Outcome struct {
	Event Event
	At    time.Time
	Err   error         // Connected: nil for a success; HTTPProbed: why it failed
	RTT   time.Duration // Connected: the connect time of a success
	Probe bool          // Connected: made by the prober, not for a client
	// Addr is the address a successful connect reached (zero: unknown);
	// the peer keeps the last one, for those who must reach the peer
	// without a connect of their own (ICP).
	Addr      netip.Addr
	Class     AnswerClass
	FirstByte time.Duration
	Origin    uint32
	Answers   bool   // Reported: of its answers
	Cause     string // Reported: whose word
	Detail    string // Reported, NextHopFailed: what was said
	// Dest is where the request went (scheme://host:port, or a tunnel's
	// host:port): NextHopFailed with Unreached, DestProbed.
	Dest      string
	Unreached bool // NextHopFailed: nothing reached Dest
	NoNextHop bool // NextHopFailed, HTTPProbed, ICPReplied: the peer has no usable next hop
}

// change is what a verdict does to the peer's row.
type change uint8

const (
	keep      change = iota
	suspect          // an alive, healthy peer turns suspect (cause, detail; byAnswers: settled by an HTTP probe only)
	settle           // an alive, suspect peer is healthy again (cause, detail)
	die              // from → dead (detail; answers: by its answers, under first-byte timeout fbt)
	revive           // from → alive, by a probe
	hold             // a flapping dead peer's run of good probes is now good (note)
	unOutlier        // an outlier answered its HTTP probe within the factor (detail)
	cutOff           // an alive parent has no usable next hop of its own (cause: who said it, detail)
	reconnect        // a parent cut off has a usable next hop again (cause, detail)
	destLost         // the parent cannot reach a destination (detail): logged
	destBack         // a probe reached a destination through it again (detail): logged
)

// verdict is what the health part makes of an outcome: a change of the
// peer's row, which the registry makes (Registry.apply), or none.
type verdict struct {
	change    change
	from      State // die, revive: the state it changes from
	cause     string
	detail    string
	byAnswers bool   // suspect: settled only by an HTTP probe
	by        string // suspect: another's word (its cause), "" for the peer's own
	loud      bool   // suspect: logged at once, as a warning
	answers   bool   // die: by its answers (capped by max_answer_dead)
	n         int64  // die by answers: the failures in a row, the last of class
	class     AnswerClass
	fbt       time.Duration
	good      int // hold
	note      *Transition
}

// observeConnect counts one connect and judges it: a failure counts
// towards the peer's death; a success resets the consecutive count. Only
// a successful probe revives a dead or unknown peer. The success path on
// an alive peer is lock-free and allocation-free.
func (h *Health) observeConnect(o Outcome, hc Config) verdict {
	at := o.At.UnixNano()
	if o.Probe {
		h.probes.Add(1)
	}
	h.connects.Add(1)
	if o.Err == nil {
		return h.connectOK(o, at, hc)
	}
	h.connectFailures.Add(1)
	class := Classify(o.Err)
	h.failures[class].Add(1)
	if class == FailTimeout {
		h.hung.Store(true)
	}
	if o.Probe {
		h.probeFailures.Add(1)
	} else {
		h.series.failure(o.At)
	}
	storeLater(&h.lastFailure, at)
	msg := o.Err.Error()
	h.lastError.Store(&msg)
	n := h.consecutive.Add(1)
	switch l := h.row.Load(); l.state {
	case Alive:
		if limit := h.peer.settings().failLimit; n >= limit {
			return verdict{change: die, from: Alive, cause: CauseConnectFailures, detail: msg}
		} else if !l.suspect {
			// healthy -> suspect
			return verdict{change: suspect, cause: CauseConnectFailures, detail: fmt.Sprintf("connect failed (%d of %d before dead): %s", n, limit, msg)}
		}
	case Unknown:
		// The first probe's verdict: no traffic has been sent, and none
		// will be until a probe succeeds.
		if o.Probe {
			return verdict{change: die, from: Unknown, cause: CauseProbe, detail: msg}
		}
	case Dead:
		if o.Probe && l.good > 0 {
			return verdict{change: hold} // a failed probe starts the held run over
		}
	}
	return verdict{}
}

// connectOK counts a successful connect: its time, the address reached.
func (h *Health) connectOK(o Outcome, at int64, hc Config) verdict {
	if o.RTT > 0 {
		h.observeTime(false, o.RTT)
	}
	if h.hung.Load() {
		h.hung.Store(false)
	}
	if o.Addr.IsValid() {
		if cur := h.reached.Load(); cur == nil || *cur != o.Addr {
			a := o.Addr // a new address: the only allocation, and a rare one
			h.reached.Store(&a)
		}
	}
	if at-h.lastSuccess.Load() > int64(time.Millisecond) {
		storeLater(&h.lastSuccess, at)
	}
	if o.RTT > 0 {
		h.smoothConnectTime(float64(o.RTT)/float64(time.Millisecond), o.Probe)
	}
	l := h.row.Load()
	if l.state == Alive {
		if h.consecutive.Load() != 0 {
			h.consecutive.Store(0)
		}
		if l.suspect && !l.httpSettle { // (a connect never settles an answer suspicion)
			// suspect -> healthy
			if o.Probe {
				return verdict{change: settle, cause: CauseProbe, detail: "own probe connected"}
			}
			return verdict{change: settle, cause: CauseConnect, detail: "a connect succeeded"}
		}
		return verdict{}
	}
	if !o.Probe || l.answerDead {
		// A traffic connect that succeeds on a dead peer was started
		// before it died; it does not revive it (revival is by probe
		// only). A parent dead by answers accepts connects: only an HTTP
		// probe revives it.
		return verdict{}
	}
	if l.flapping && l.good+1 < hc.FlapLimit {
		return verdict{change: hold, good: l.good + 1, note: heldNote(o.At, l, "probe", hc.FlapLimit)}
	}
	return verdict{change: revive, from: l.state, cause: CauseProbe}
}

// smoothConnectTime folds a connect time (ms) into the smoothed time and
// its deviation.
func (h *Health) smoothConnectTime(ms float64, probe bool) {
	if probe {
		storeFloat(&h.lastProbe, ms)
	}
	srtt := loadFloat(&h.srtt)
	if srtt == 0 {
		storeFloat(&h.srtt, ms)
		storeFloat(&h.rttvar, ms/2)
		return
	}
	dev := math.Abs(srtt - ms)
	nsrtt := 0.875*srtt + 0.125*ms
	rv := loadFloat(&h.rttvar)
	nrv := 0.75*rv + 0.25*dev
	// Skip stores that change nothing worth knowing (under 1%): a steady
	// peer's success path then writes no shared line.
	if math.Abs(nsrtt-srtt) > srtt/100 {
		storeFloat(&h.srtt, nsrtt)
	}
	if math.Abs(nrv-rv) > srtt/100 {
		storeFloat(&h.rttvar, nrv)
	}
}

// observeSlow judges a connect pending past its hedge delay: the peer
// turns suspect (sorted behind healthy peers, and probed) until a connect
// to it succeeds.
func (h *Health) observeSlow() verdict {
	if l := h.row.Load(); l.state == Alive && l.suspect {
		return verdict{}
	}
	h.hung.Store(true)
	return verdict{change: suspect, cause: CauseSlowConnect, detail: "a connect is pending past its hedge delay"}
}

// observeReport judges another's word that the peer is down: suspect, and
// probed at once (over HTTP when the word is of its answers). It never
// makes a peer dead or alive.
func (h *Health) observeReport(o Outcome) verdict {
	return verdict{change: suspect, cause: o.Cause, detail: o.Detail, by: o.Cause, byAnswers: o.Answers, loud: true}
}

// observeTime hands a successful connect's time (head false) or an answer
// head's time to the peer's metrics series, made on first use.
func (h *Health) observeTime(head bool, d time.Duration) {
	pt := h.timings.Load()
	if pt == nil {
		if h.times == nil {
			return
		}
		t := h.times.Load()
		if t == nil {
			return
		}
		c, hd := (*t).For(h.peer.Name())
		pt = &peerTimings{connect: c, head: hd}
		if !h.timings.CompareAndSwap(nil, pt) {
			pt = h.timings.Load()
		}
	}
	if head {
		pt.head.Observe(d.Seconds())
	} else {
		pt.connect.Observe(d.Seconds())
	}
}

// FailureClass is the kind of a failed connect.
type FailureClass uint8

const (
	FailRefused FailureClass = iota
	FailTimeout
	FailReset
	FailUnreachable
	FailDNS
	FailTLS
	failClasses
)

// FailureClassNames are the keys of PEER's failures_by_class, in order.
var FailureClassNames = [failClasses]string{"refused", "timeout", "reset", "unreachable", "dns", "tls"}

// Classify names the kind of a connect error. An error of no known kind
// counts as a reset (the connection failed after it began).
func Classify(err error) FailureClass {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recErr tls.RecordHeaderError
	var tlsFail interface{ TLSFailure() bool }
	switch {
	case errors.As(err, &tlsFail) && tlsFail.TLSFailure():
		return FailTLS
	case errors.As(err, &dnsErr):
		return FailDNS
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &recErr):
		return FailTLS
	case errors.Is(err, syscall.ECONNREFUSED):
		return FailRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTDOWN), errors.Is(err, syscall.ENETDOWN):
		return FailUnreachable
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT), isTimeout(err):
		return FailTimeout
	}
	return FailReset
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// storeLater stores v unless a later time is already there, so that
// out-of-order reports never move a timestamp backwards.
func storeLater(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if cur >= v || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
