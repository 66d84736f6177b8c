package cache

import "testing"

// TestQuickAbort: what Squid's quick_abort_* decide for a download whose
// client left, with Squid's defaults (16 KB, 16 KB, 95 %), Squid's "-1",
// and everything off (0, 0).
func TestQuickAbort(t *testing.T) {
	squid := quickAbort{min: 16 << 10, max: 16 << 10, pct: 95}
	for _, tc := range []struct {
		name        string
		q           quickAbort
		got, length int64
		want        bool
	}{
		{"a little left", squid, 100<<10 - 10<<10, 100 << 10, true},
		{"exactly min left", squid, 100<<10 - 16<<10, 100 << 10, true},
		{"more than max left", squid, 100<<10 - 17<<10, 100 << 10, false},
		{"length not known", squid, 1 << 20, -1, false},
		{"more than the length", squid, 101, 100, false},
		{"between min and max, past pct", quickAbort{min: 1 << 10, max: 1 << 20, pct: 95}, 960 << 10, 1000 << 10, true},
		{"between min and max, before pct", quickAbort{min: 1 << 10, max: 1 << 20, pct: 95}, 900 << 10, 1000 << 10, false},
		{"-1 finishes everything", quickAbort{min: -1}, 0, -1, true},
		{"off", quickAbort{}, 99, 100, false},
		{"off, nothing left", quickAbort{}, 100, 100, true},
	} {
		if got := tc.q.finish(tc.got, tc.length); got != tc.want {
			t.Errorf("%s: finish(%d, %d) = %v; want %v", tc.name, tc.got, tc.length, got, tc.want)
		}
	}
}

// TestAbortMinText: quick_abort_min reads a size or -1, and writes what it
// reads.
func TestAbortMinText(t *testing.T) {
	for in, want := range map[string]AbortMin{"-1": -1, "16KiB": 16 << 10, "0": 0} {
		var a AbortMin
		if err := a.UnmarshalText([]byte(in)); err != nil || a != want {
			t.Errorf("%q: %d, %v; want %d", in, a, err, want)
		}
		if out, _ := a.MarshalText(); string(out) != in {
			t.Errorf("%d written as %q; want %q", a, out, in)
		}
	}
	var a AbortMin
	if err := a.UnmarshalText([]byte("-2")); err == nil {
		t.Error("-2 accepted")
	}
}
