package handover

import (
	"bytes"
	"strings"
	"testing"

	"github.com/peerd/peerd/peers"
)

// TestStateFrames: the two frames of the state pipe come out as they went
// in, an empty one included; a frame longer than the bound is refused
// before it is read, and a cut one is an error, never a short state.
func TestStateFrames(t *testing.T) {
	var b bytes.Buffer
	first, last := []byte(`{"version":1,"peers":{"a":{"admin_state":"drain"}}}`), []byte(nil)
	writeFrame(&b, first)
	writeFrame(&b, last)
	for i, want := range [][]byte{first, last} {
		got, err := readFrame(&b)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("frame %d: %q %v; want %q", i, got, err, want)
		}
	}
	if _, err := readFrame(&b); err == nil {
		t.Fatal("a frame read from an empty pipe")
	}
	huge := []byte{0xff, 0xff, 0xff, 0xff}
	if _, err := readFrame(bytes.NewReader(huge)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("a 4 GiB frame: %v", err)
	}
	var cut bytes.Buffer
	writeFrame(&cut, first)
	if _, err := readFrame(bytes.NewReader(cut.Bytes()[:cut.Len()-3])); err == nil {
		t.Fatal("a cut frame was read")
	}
}

// FuzzStateFrame: whatever comes down the state pipe (a new process
// started by something else, a frame cut by a crash) is read as a frame
// or refused, never a panic or an allocation past the bound, and what a
// frame holds is read as a state or refused.
func FuzzStateFrame(f *testing.F) {
	var b bytes.Buffer
	writeFrame(&b, []byte(`{"version":1,"written":"2026-12-07T10:00:00Z","peers":{"a":{"addr":"10.0.0.1:3128","admin_state":"drain","admin_reason":"x"}}}`))
	f.Add(b.Bytes())
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := readFrame(bytes.NewReader(in))
		if err != nil {
			return
		}
		if len(got) > maxStateFrame || len(got) > len(in) {
			t.Fatalf("a frame of %d bytes from %d", len(got), len(in))
		}
		peers.ParseSavedState(got)
	})
}
