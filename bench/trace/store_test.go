package trace

import (
	"testing"
)

func cacheRun(tb testing.TB, t *Trace, memory int64) Result {
	r, err := CacheRun(t, memory)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// TestTheCacheBeatsLRUOnARealTrace: on the web12 trace, peerd's memory
// cache, with every overhead it counts, gets more object hits than LRU
// and S3-FIFO simulated over the bodies alone, and about as many byte
// hits as S3-FIFO (the byte-hit champion).
func TestTheCacheBeatsLRUOnARealTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 95,607 requests three times")
	}
	tr, err := Open("../traces/web12.trace.gz", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, footprint := tr.Footprint()
	for _, pct := range []int64{1, 5, 10} {
		memory := footprint * pct / 100
		got := cacheRun(t, tr, memory)
		lru, s3 := Simulate(NewLRU(memory), tr), Simulate(NewS3FIFO(memory), tr)
		t.Logf("%d%%: peerd %.1f%% objects, %.1f%% bytes; LRU %.1f%%, %.1f%%; S3-FIFO %.1f%%, %.1f%%", pct,
			100*got.ObjectHitRatio(), 100*got.ByteHitRatio(), 100*lru.ObjectHitRatio(), 100*lru.ByteHitRatio(),
			100*s3.ObjectHitRatio(), 100*s3.ByteHitRatio())
		if got.ObjectHitRatio() < s3.ObjectHitRatio()+0.02 || got.ObjectHitRatio() < lru.ObjectHitRatio()+0.05 {
			t.Errorf("%d%% of the footprint: object hit ratio %.3f; want 5 points over LRU (%.3f) and 2 over S3-FIFO (%.3f)",
				pct, got.ObjectHitRatio(), lru.ObjectHitRatio(), s3.ObjectHitRatio())
		}
		if got.ByteHitRatio() < s3.ByteHitRatio()-0.02 {
			t.Errorf("%d%% of the footprint: byte hit ratio %.3f; want within 2 points of S3-FIFO's (%.3f)",
				pct, got.ByteHitRatio(), s3.ByteHitRatio())
		}
	}
}
