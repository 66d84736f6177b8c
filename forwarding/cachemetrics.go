package forwarding

// This file holds the cache's metrics (peerd_cache_*).

import (
	"github.com/peerd/peerd/cache"
	"github.com/prometheus/client_golang/prometheus"
)

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
	if cc := c.p.Cache(); cc != nil {
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
