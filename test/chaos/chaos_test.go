package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The schedule is a function of the seed: the same seed names the same
// faults and requests, another seed others, and every kind occurs.
func TestScheduleIsTheSeeds(t *testing.T) {
	var seen [faultKinds]int
	differ := 0
	for id := uint64(0); id < 5000; id++ {
		f, again := faultFor(7, id, 0), faultFor(7, id, 0)
		e, eAgain := exchangeFor(7, id), exchangeFor(7, id)
		if f != again || e != eAgain {
			t.Fatalf("exchange %d: the schedule changed between two reads", id)
		}
		if f != faultFor(8, id, 0) {
			differ++
		}
		seen[f]++
	}
	for k, n := range seen {
		if n == 0 && faultWeights[k] > 0 { // (the run-level faults' answers are not drawn)
			t.Errorf("fault %s never scheduled in 5000 exchanges", fault(k))
		}
	}
	if differ < 1000 {
		t.Errorf("seeds 7 and 8 differ on %d of 5000 exchanges; want most", differ)
	}
	evs := timeline(3, 60*time.Second)
	var kinds [events]int
	for _, e := range evs {
		kinds[e.event]++
	}
	for k, n := range kinds {
		if n == 0 {
			t.Errorf("a 60s run has no %s: %v", event(k), evs)
		}
	}
}

// ask sends raw to the parent and reads one answer with net/http.
func ask(t *testing.T, p *parent, raw string) (*http.Response, []byte, error) {
	t.Helper()
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// Each fault does to the answer what its name says, as net/http reads it.
func TestParentFaults(t *testing.T) {
	rec := newRecord()
	p, err := newParent("p1", 1, time.Now(), rec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.kill()
	for _, f := range []fault{normal, shortBody, badChunk, resetBody, own503, origin5xx, closeEarly} {
		// The first exchange number at which seed 1 schedules f.
		id := uint64(0)
		for faultFor(1, id, 0) != f {
			id++
		}
		resp, b, err := ask(t, p, fmt.Sprintf("GET http://o.test/c/3 HTTP/1.1\r\nHost: o.test\r\nX-Chaos-Id: %d\r\n\r\n", id))
		switch {
		case f == closeEarly:
			if err == nil {
				t.Errorf("%s: an answer; want none", f)
			}
		case f.cutsBody():
			if err == nil || resp.Header.Get("X-Chaos-Fault") != f.String() {
				t.Errorf("%s: body read %v; want a cut body marked %s", f, err, f)
			}
		case f == own503 && resp.StatusCode != 503, f == origin5xx && resp.StatusCode != 500:
			t.Errorf("%s: status %d", f, resp.StatusCode)
		case f == normal && (err != nil || string(b) != string(body("/c/3", versionOf(resp.Header.Get("ETag")), objectSize(3)))):
			t.Errorf("normal: %v, %d bytes; want object 3 whole", err, len(b))
		}
	}
}

// judge tells the origin's cut from peerd's, and a stored cut (I5).
func TestJudge(t *testing.T) {
	c := &client{seed: 1, start: time.Now(), rec: newRecord()}
	e := exchange{id: 5, kind: getCached, object: 3}
	whole := body("/c/3", 1, objectSize(3))
	for _, tc := range []struct {
		name, head string
		got        []byte
		readErr    error
		want       string // outcome, or the invariant violated
	}{
		{"whole", "ETag: \"v1\"", whole, nil, "ok"},
		{"wrong version's body", "ETag: \"v2\"", whole, nil, "I1"},
		{"origin cut", "ETag: \"v1\"\r\nX-Chaos-Fault: short_body", whole[:10], io.ErrUnexpectedEOF, "origin_cut"},
		{"peerd cut", "ETag: \"v1\"\r\nX-Chaos-Fault: normal", whole[:10], io.ErrUnexpectedEOF, "I2"},
		{"stored cut", "ETag: \"v1\"\r\nCache-Status: peerd-a; hit; ttl=1\r\nX-Chaos-Fault: short_body", whole[:10], io.ErrUnexpectedEOF, "I5"},
		{"stored short body", "ETag: \"v1\"\r\nCache-Status: peerd-a; hit; ttl=1", whole[:10], nil, "I5"},
		{"peerd error", "X-Peerd-Error: no-peers", nil, nil, "peerd_error"},
	} {
		status := "200 OK"
		if strings.Contains(tc.head, "Peerd-Error") {
			status = "503 Service Unavailable"
		}
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader("HTTP/1.1 "+status+"\r\n"+tc.head+"\r\nContent-Length: 0\r\n\r\n")), nil)
		if err != nil {
			t.Fatal(err)
		}
		v := c.judge(e, resp, tc.got, tc.readErr)
		if got := v.outcome; got == "violation" {
			got = v.invariant
			if got != tc.want {
				t.Errorf("%s: %s (%s); want %s", tc.name, got, v.detail, tc.want)
			}
		} else if got != tc.want {
			t.Errorf("%s: %s; want %s", tc.name, got, tc.want)
		}
	}
}
