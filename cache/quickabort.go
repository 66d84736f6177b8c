package cache

// This file holds what becomes of a download being stored when its client
// goes away: Squid's quick_abort_min, quick_abort_max and quick_abort_pct.

import (
	"fmt"
	"strings"

	"github.com/peerd/peerd/internal/conf"
)

// AbortMin is quick_abort_min: a size, or -1 for "finish every stored
// download whose client left".
type AbortMin int64

// UnmarshalText reads a size, or "-1".
func (a *AbortMin) UnmarshalText(b []byte) error {
	if strings.TrimSpace(string(b)) == "-1" {
		*a = -1
		return nil
	}
	var s conf.ByteSize
	if err := s.UnmarshalText(b); err != nil {
		return fmt.Errorf("%v, or -1 to finish every stored download", err)
	}
	*a = AbortMin(s)
	return nil
}

// MarshalText writes it as UnmarshalText reads it.
func (a AbortMin) MarshalText() ([]byte, error) {
	if a < 0 {
		return []byte("-1"), nil
	}
	return conf.ByteSize(a).MarshalText()
}

// quickAbort is the three settings, as the store uses them.
type quickAbort struct {
	min, max int64
	pct      int
}

// finish reports whether a download being stored goes on to its end
// after its client left, having got bytes of a body of length bytes (-1:
// not known), as Squid decides it: always with a min of -1; never for a
// length not known; when at most min bytes are left; never when more than
// max are left; otherwise when more than pct percent has arrived.
func (q quickAbort) finish(got, length int64) bool {
	switch {
	case q.min < 0:
		return true
	case length < 0 || got > length:
		return false
	case length-got <= q.min:
		return true
	case length-got > q.max:
		return false
	}
	return got*100 > length*int64(q.pct)
}

// FinishAborted reports whether a download this cache is storing goes on
// to its end now that its client left, having got bytes of length (-1:
// not known).
func (c *Cache) FinishAborted(got, length int64) bool {
	return c.cfg().quickAbort.finish(got, length)
}
