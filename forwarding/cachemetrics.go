package forwarding

// This file holds the cache's metrics and the writing of stored bodies to
// the client: from memory, from a file being written, or from the disk
// tier.

import (
	"github.com/peerd/peerd/cache"
	"github.com/prometheus/client_golang/prometheus"
)

// openBody opens a disk-only object's body for this request (once: a
// refreshed object reads the same file); false when it is gone, and was
// dropped: the request is a miss.
func (l *cacheLayer) openBody(o *cache.Object) bool {
	if !o.OnDisk() {
		return true
	}
	if l.diskBody != nil && l.diskBody.Serves(o) {
		return true
	}
	br, err := o.OpenBody()
	if err != nil {
		return false
	}
	if l.diskBody != nil {
		l.diskBody.Close()
	}
	l.diskBody = br
	return true
}

// bodyWriter writes a stored body to the client, counting its bytes.
type bodyWriter struct{ l *cacheLayer }

func (w bodyWriter) Write(p []byte) (int, error) {
	if err := w.l.writeStored(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CacheCollector exports the cache's metrics (contract section 11).
func (p *Proxy) CacheCollector() prometheus.Collector { return cacheCollector{p} }

type cacheCollector struct{ p *Proxy }

var (
	cacheRequestsDesc = prometheus.NewDesc("peerd_cache_requests_total", "Requests the cache saw, by result: hit (answered from memory, collapsed ones included), disk_hit (the body read from the disk cache), miss, refresh (revalidated), stale (served stale because no next hop answered).", []string{"result"}, nil)
	cacheBytesDesc    = prometheus.NewDesc("peerd_cache_bytes", "Bytes stored in the memory cache.", nil, nil)
	cacheObjectsDesc  = prometheus.NewDesc("peerd_cache_objects", "Responses stored in the memory cache.", nil, nil)
	diskBytesDesc     = prometheus.NewDesc("peerd_cache_disk_bytes", "Bytes of stored responses in the disk cache.", nil, nil)
	diskObjectsDesc   = prometheus.NewDesc("peerd_cache_disk_objects", "Responses stored in the disk cache.", nil, nil)
	diskErrorsDesc    = prometheus.NewDesc("peerd_cache_disk_errors_total", "Disk cache faults: writes that failed (ENOSPC, EIO, a read-only file system) and stored objects that did not check out when read.", nil, nil)
)

func (cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cacheRequestsDesc
	ch <- cacheBytesDesc
	ch <- cacheObjectsDesc
	ch <- diskBytesDesc
	ch <- diskObjectsDesc
	ch <- diskErrorsDesc
}

func (c cacheCollector) Collect(ch chan<- prometheus.Metric) {
	var s cache.Stats
	if cc := c.p.cache.Load(); cc != nil {
		s = cc.Stats()
	}
	for _, r := range []struct {
		name string
		n    int64
	}{{"hit", s.Hits - s.DiskHits}, {"disk_hit", s.DiskHits}, {"miss", s.Misses}, {"refresh", s.Refreshes}, {"stale", s.StaleServed}} {
		ch <- prometheus.MustNewConstMetric(cacheRequestsDesc, prometheus.CounterValue, float64(r.n), r.name)
	}
	ch <- prometheus.MustNewConstMetric(cacheBytesDesc, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(cacheObjectsDesc, prometheus.GaugeValue, float64(s.Objects))
	ch <- prometheus.MustNewConstMetric(diskBytesDesc, prometheus.GaugeValue, float64(s.DiskBytes))
	ch <- prometheus.MustNewConstMetric(diskObjectsDesc, prometheus.GaugeValue, float64(s.DiskObjects))
	ch <- prometheus.MustNewConstMetric(diskErrorsDesc, prometheus.CounterValue, float64(s.DiskErrors))
}

func (l *cacheLayer) writeStored(p []byte) error {
	tx := l.tx
	if _, err := tx.cc.w.Write(p); err != nil {
		tx.clientGone = true
		return err
	}
	tx.bytes += int64(len(p))
	return nil
}

// streamObject writes an object's body, following it while it is still
// arriving for the request that fetches it; a body that broke off there
// cuts this client off too (it was promised the whole length).
func (l *cacheLayer) streamObject(o *cache.Object) error {
	tx := l.tx
	next := o.Stream
	if o.FromDiskWriter() {
		// A disk-only body being written: read from its file.
		bs := o.NewBodyStream()
		defer bs.Close()
		next = bs.Next
	}
	for off := int64(0); ; {
		p, done, failed := next(off)
		if len(p) > 0 {
			if err := l.writeStored(p); err != nil {
				return err
			}
			off += int64(len(p))
		}
		if failed {
			return errClientGone
		}
		if done && off >= o.Length() {
			return nil
		}
		if !done && tx.cc.w.Flush() != nil {
			tx.clientGone = true
			return errClientGone
		}
	}
}
