package forwarding

import (
	"errors"
	"os"
	"testing"
)

// TestClassify: the class of a failure follows from facts recorded where
// they happen, never from the error's text.
func TestClassify(t *testing.T) {
	plain := errors.New("connection reset by peer")
	timeout := os.ErrDeadlineExceeded // a net.Error with Timeout() true
	for _, tc := range []struct {
		name         string
		dialFailed   bool
		wroteHeaders bool
		err          error
		want         failure
	}{
		{"dial failed", true, false, plain, connectFailed},
		{"dial timed out", true, false, timeout, connectFailed},
		{"no headers written", false, false, plain, beforeWrite},
		{"no headers written, timeout", false, false, timeout, beforeWrite},
		{"written, then reset", false, true, plain, afterWrite},
		{"written, then no answer in time", false, true, timeout, timedOut},
		{"a message that mentions dial", false, true, errors.New("dial tcp: refused"), afterWrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &attempt{}
			a.connectErr.Store(tc.dialFailed)
			a.wroteHeaders.Store(tc.wroteHeaders)
			if got := classify(a, tc.err); got != tc.want {
				t.Fatalf("classify = %s; want %s", failureReasons[got], failureReasons[tc.want])
			}
		})
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
