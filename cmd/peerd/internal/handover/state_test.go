package handover

import (
	"bytes"
	"strings"
	"testing"
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
