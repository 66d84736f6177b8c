package trace

// This file holds the replay of a trace through peerd's memory cache
// itself, in process: its public API as the proxy drives it (a lookup,
// else an admission and the body), so that the cache's hit ratios sit
// beside the simulated policies' and the optimum's with no HTTP between.

import (
	"fmt"
	"time"

	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/internal/h1"
)

// CacheRun replays t through a memory cache of memory bytes and counts
// the hits.
func CacheRun(t *Trace, memory int64) (Result, error) {
	cfg := cache.DefaultConfig()
	cfg.Memory = conf.ByteSize(memory)
	cfg.MaxObject = conf.ByteSize(memory)
	cfg.QuickAbortMin = -1
	c := cache.New(cfg)
	var resp h1.Response
	if err := h1.ParseResponse([]byte("HTTP/1.1 200 OK\r\nCache-Control: max-age=86400\r\nETag: \"1\"\r\n\r\n"), &resp); err != nil {
		return Result{}, err
	}
	body := make([]byte, 64<<10)
	now := time.Now()
	var r Result
	req := &cache.Request{}
	for _, q := range t.Requests {
		r.Requests++
		r.Bytes += q.Size
		req.Reset("GET", nil)
		req.Key = cache.AppendKey(req.Key[:0], []byte("http"), []byte("origin.test"), nil, fmt.Appendf(nil, "/o/%d/%d", q.ID, q.Size))
		if o, v := c.Lookup(req, now); o != nil && v == cache.Hit {
			r.Hits++
			r.HitBytes += q.Size
			continue
		}
		w := c.Admit(req, &resp, q.Size, now, now, nil)
		if w == nil {
			continue
		}
		for left := q.Size; left > 0; left -= int64(len(body)) {
			w.Write(body[:min(left, int64(len(body)))])
		}
		w.Finish(true)
	}
	return r, nil
}
