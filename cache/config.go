package cache

// This file holds the [cache] section: its keys, defaults and validation.

import (
	"regexp"
	"time"

	"github.com/peerd/peerd/internal/conf"
)

// Config is the [cache] section (contract section 11).
type Config struct {
	// Memory bounds the store (Squid cache_mem); 0 turns the cache off.
	Memory conf.ByteSize `toml:"memory"`
	// MaxObject: larger responses are relayed, not stored (Squid
	// maximum_object_size).
	MaxObject conf.ByteSize `toml:"max_object"`
	// Disk is the directory of the persistent store (Squid cache_dir);
	// "" keeps the cache in memory only.
	Disk string `toml:"disk"`
	// DiskSize bounds the bytes of stored responses on disk.
	DiskSize conf.ByteSize `toml:"disk_size"`
	// MaxObjectInMemory: with a disk store, larger responses live on
	// disk only (Squid maximum_object_size_in_memory).
	MaxObjectInMemory conf.ByteSize `toml:"max_object_in_memory"`
	// DiskFsync: each stored object, then its journal record, is
	// fsync'd, so that a power loss keeps it (about half as long again to
	// store an object, measured); without, a power loss can lose the
	// objects stored in the last seconds, and never serves a torn one.
	DiskFsync bool `toml:"disk_fsync"`
	// HeuristicPercent of the time since Last-Modified is the freshness
	// of a response that states none (RFC 9111 4.2.2).
	HeuristicPercent int `toml:"heuristic_percent"`
	// HeuristicMax caps heuristic freshness (Squid refresh_pattern max).
	HeuristicMax time.Duration `toml:"heuristic_max"`
	// Collapse: concurrent misses for one key become one request to the
	// next hop (Squid collapsed_forwarding).
	Collapse bool `toml:"collapse"`
	// StaleIfDead: with no live next hop, a stale response up to this far
	// past its freshness answers instead of an error; 0 turns it off.
	StaleIfDead time.Duration `toml:"stale_if_dead"`
	// RefreshPatterns (Squid refresh_pattern): for a response that states
	// no freshness, the first pattern matching its URL gives the
	// heuristic instead of heuristic_percent and heuristic_max.
	RefreshPatterns []RefreshPattern `toml:"refresh_patterns"`
	// QuickAbortMin, QuickAbortMax and QuickAbortPct decide whether a
	// download being stored goes on when its client leaves (Squid's
	// quick_abort_*): yes when at most QuickAbortMin is left (-1: always),
	// no when more than QuickAbortMax is left, else yes when more than
	// QuickAbortPct percent has arrived.
	QuickAbortMin AbortMin      `toml:"quick_abort_min"`
	QuickAbortMax conf.ByteSize `toml:"quick_abort_max"`
	QuickAbortPct int           `toml:"quick_abort_pct"`
}

// RefreshPattern is one refresh_patterns entry.
type RefreshPattern struct {
	// Pattern is an RE2 regular expression on the URL ("(?i)" for
	// Squid's -i).
	Pattern string `toml:"pattern"`
	// Min: a response without Last-Modified is fresh this long, and a
	// heuristic lifetime is never shorter.
	Min time.Duration `toml:"min"`
	// Percent of the time since Last-Modified, capped at Max.
	Percent int           `toml:"percent"`
	Max     time.Duration `toml:"max"`
	// RefreshIMS (Squid refresh-ims): a client's conditional request for
	// a matching URL is checked with the next hop even when the stored
	// response is fresh, so a client that asks "has it changed?" (apt's
	// Release files) hears the origin's answer.
	RefreshIMS bool `toml:"refresh_ims"`
}

// DefaultConfig returns the built-in [cache] defaults.
func DefaultConfig() Config {
	return Config{
		Memory:            256 << 20,
		MaxObject:         4 << 20,
		DiskSize:          10 << 30,
		MaxObjectInMemory: 512 << 10,
		HeuristicPercent:  10,
		HeuristicMax:      24 * time.Hour,
		Collapse:          true,
		StaleIfDead:       24 * time.Hour,
		QuickAbortMin:     16 << 10,
		QuickAbortMax:     16 << 10,
		QuickAbortPct:     95,
	}
}

// Validate checks the section.
func (c Config) Validate() error {
	var es conf.Errors
	if c.Memory < 0 {
		es.Addf("cache", "memory", "must not be negative")
	}
	if c.MaxObject <= 0 {
		es.Addf("cache", "max_object", "must be positive")
	}
	switch {
	case c.Disk == "" && c.Memory > 0 && c.MaxObject > c.Memory:
		es.Addf("cache", "max_object", "%v is more than memory (%v)", c.MaxObject, c.Memory)
	case c.Disk != "" && c.MaxObject > c.DiskSize:
		es.Addf("cache", "max_object", "%v is more than disk_size (%v)", c.MaxObject, c.DiskSize)
	}
	if c.Disk != "" {
		if c.Memory <= 0 {
			es.Addf("cache", "memory", "must be positive with a disk store: memory is the tier in front of it")
		}
		if c.DiskSize <= 0 {
			es.Addf("cache", "disk_size", "must be positive")
		}
	}
	if c.MaxObjectInMemory <= 0 {
		es.Addf("cache", "max_object_in_memory", "must be positive")
	} else if c.Disk != "" && c.Memory > 0 && c.MaxObjectInMemory > c.Memory {
		es.Addf("cache", "max_object_in_memory", "%v is more than memory (%v)", c.MaxObjectInMemory, c.Memory)
	}
	if c.HeuristicPercent < 0 || c.HeuristicPercent > 100 {
		es.Addf("cache", "heuristic_percent", "must be between 0 and 100, not %d", c.HeuristicPercent)
	}
	if c.HeuristicMax < 0 {
		es.Addf("cache", "heuristic_max", "must not be negative")
	}
	if c.QuickAbortPct < 0 || c.QuickAbortPct > 100 {
		es.Addf("cache", "quick_abort_pct", "must be between 0 and 100, not %d", c.QuickAbortPct)
	}
	if c.StaleIfDead < 0 {
		es.Addf("cache", "stale_if_dead", "must not be negative")
	}
	for i, p := range c.RefreshPatterns {
		if _, err := regexp.Compile(p.Pattern); err != nil {
			es.Addf("cache", "refresh_patterns", "[%d] pattern %q: %v", i, p.Pattern, err)
		}
		if p.Percent < 0 || p.Percent > 100 || p.Min < 0 || p.Max < 0 || p.Min > p.Max {
			es.Addf("cache", "refresh_patterns", "[%d]: want 0 <= min <= max and percent 0-100", i)
		}
	}
	return es.Err()
}
