package forwarding

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// TestClassify: the class of a failure follows from how far the attempt
// got, recorded where each step happened, never from the error's text.
func TestClassify(t *testing.T) {
	plain := errors.New("connection reset by peer")
	timeout := os.ErrDeadlineExceeded
	for _, tc := range []struct {
		name string
		a    attempt
		st   bool // status in retry_on_status
		want failure
	}{
		{"dial failed", attempt{progress: dialling, err: plain}, false, connectFailed},
		{"dial timed out", attempt{progress: dialling, err: timeout}, false, connectFailed},
		{"no head written", attempt{progress: connected, err: plain}, false, beforeWrite},
		{"written, then reset", attempt{progress: headWritten, err: plain}, false, afterWrite},
		{"body written, then reset", attempt{progress: bodyWritten, err: plain}, false, afterWrite},
		{"written, no answer in time", attempt{progress: headWritten, err: timeout, timedOut: true}, false, timedOut},
		{"half a head, then nothing in time", attempt{progress: headWritten, err: timeout, gotBytes: true}, false, afterWrite},
		{"pooled, peer had closed", attempt{progress: headWritten, reused: true, err: plain}, false, staleConn},
		{"pooled, write failed", attempt{progress: connected, reused: true, err: plain}, false, staleConn},
		{"pooled, half a head", attempt{progress: headWritten, reused: true, err: plain, gotBytes: true}, false, afterWrite},
		{"pooled, silent", attempt{progress: headWritten, reused: true, err: timeout, timedOut: true}, false, timedOut},
		{"a message that mentions dial", attempt{progress: headWritten, err: errors.New("dial tcp: refused")}, false, afterWrite},
		{"final answer", attempt{progress: responseHead, final: true, status: 200}, false, notFailed},
		{"final answer to retry", attempt{progress: responseHead, final: true, status: 502}, true, statusRetry},
		{"final answer after a 1xx", attempt{progress: sentToClient, final: true, status: 502}, true, notFailed},
		{"broke after a 1xx", attempt{progress: sentToClient, err: plain}, false, committed},
		{"client body broke", attempt{progress: headWritten, err: errClientBody, clientBody: true}, false, committed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.class(tc.st); got != tc.want {
				t.Fatalf("class = %s; want %s", got, tc.want)
			}
		})
	}
}

// TestDecide covers every class × method × body × budget case of the one
// retry decision.
func TestDecide(t *testing.T) {
	methods := []struct {
		name       string
		idempotent bool
	}{{"GET", true}, {"PUT", true}, {"POST", false}}
	bodies := []struct {
		name       string
		replayable bool
	}{{"buffered", true}, {"streamed", false}}
	for c := notFailed; c <= committed; c++ {
		for _, m := range methods {
			for _, b := range bodies {
				for _, retry504 := range []bool{false, true} {
					for _, budget := range []bool{false, true} {
						f := facts{idempotent: m.idempotent, replayable: b.replayable, retry504: retry504}
						retriable := m.idempotent && b.replayable
						var want verdict
						switch c {
						case connectFailed, beforeWrite:
							want = nextHop // nothing reached the hop: always, for free
						case staleConn:
							want = sameFresh
						case afterWrite, statusRetry:
							if retriable && budget {
								want = nextHop
							}
						case timedOut:
							if retriable && retry504 && budget {
								want = nextHop
							}
						}
						name := fmt.Sprintf("%s/%s/%s/504=%v/budget=%v", c, m.name, b.name, retry504, budget)
						if got := decide(c, f, budget); got != want {
							t.Errorf("%s: %s; want %s", name, got, want)
						}
					}
				}
			}
		}
	}
	for c := notFailed; c <= committed; c++ {
		want := c == afterWrite || c == timedOut || c == statusRetry
		if got := costsBudget(c); got != want {
			t.Errorf("costsBudget(%s) = %v; want %v", c, got, want)
		}
	}
}

func TestIdempotentMethods(t *testing.T) {
	for m, want := range map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true, "PUT": true, "DELETE": true, "POST": false, "PATCH": false, "CONNECT": false} {
		if got := idempotent(m); got != want {
			t.Errorf("idempotent(%s) = %v; want %v", m, got, want)
		}
	}
}

func TestSiblingMiss(t *testing.T) {
	for status, want := range map[int]bool{504: true, 503: true, 500: true, 403: true, 407: true, 401: true, 200: false, 404: false, 304: false} {
		if got := siblingMiss(status); got != want {
			t.Errorf("siblingMiss(%d) = %v; want %v", status, got, want)
		}
	}
}
