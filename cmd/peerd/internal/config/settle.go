package config

// This file holds what is settled after decoding and before validation:
// defaults that follow the keys they depend on, and a wrong type being
// its key's only problem.

import (
	"fmt"
	"strings"
)

// dependentDefaults makes a default that is bounded by another key
// follow it when only the other was set: a valid squid.conf's
// shutdown_lifetime of 1 s gives a grace of 1 s, not an error.
func (d *decoder) dependentDefaults(c *File) {
	set := func(path string) bool { _, ok := d.at[path]; return ok }
	if !set("proxy.shutdown_idle_grace") {
		c.Proxy.ShutdownIdleGrace = min(c.Proxy.ShutdownIdleGrace, max(c.Proxy.ShutdownTimeout, 0))
	}
	if !set("health.probe_max_interval") {
		c.Health.ProbeMaxInterval = max(c.Health.ProbeMaxInterval, c.Health.ProbeInterval)
	}
}

// typeErrorsAlone drops the problems about a key whose value had the
// wrong type: a range check saw only the zero value left behind.
func (ps Problems) typeErrorsAlone() Problems {
	wrong := map[string]bool{}
	for _, p := range ps {
		if strings.Contains(p.msg, ": wrong type") {
			wrong[p.where()] = true
		}
	}
	if len(wrong) == 0 {
		return ps
	}
	out := ps[:0]
	for _, p := range ps {
		if !wrong[p.where()] || strings.Contains(p.msg, ": wrong type") {
			out = append(out, p)
		}
	}
	return out
}

// where is the key and line a problem is about.
func (p Problem) where() string { return fmt.Sprintf("%d %s", p.line, p.key) }
