package squidimport

// This file holds import-squid's reading of Squid's durations and sizes,
// the fitting of maximum_object_size to peerd's memory cache, cache_dir,
// and refresh_pattern where peerd has an equivalent.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/peerd/peerd/cache"
)

// fitMaxObject drops every store size under "cache deny all", and
// otherwise a maximum_object_size larger than the store that would hold it
// (the disk store with a cache_dir, else the memory cache) and a
// maximum_object_size_in_memory larger than the memory cache: peerd
// refuses both.
func (s *squidImport) fitMaxObject() {
	if s.cacheOff {
		// "cache deny all": memory = "0", and no store to size.
		if s.diskDir != "" {
			s.note(0, "cache_dir %s: cache deny all stores nothing, so peerd has no disk store", s.diskDir)
		}
		s.diskDir, s.cacheMem, s.maxObject, s.maxInMemory = "", "", "", ""
		return
	}
	mem := int64(cache.DefaultConfig().Memory)
	if s.cacheMem != "" {
		mem = sizeBytes(s.cacheMem)
	}
	if s.maxObject != "" {
		limit, what := mem, "the memory cache"
		if s.diskDir != "" {
			limit, what = sizeBytes(s.diskSize), "the cache_dir"
		}
		if sizeBytes(s.maxObject) > limit {
			s.note(0, "maximum_object_size %s is more than %s (%d bytes): peerd keeps its default max_object", s.maxObject, what, limit)
			s.maxObject = ""
		}
	}
	if s.maxInMemory != "" && (s.diskDir == "" || sizeBytes(s.maxInMemory) > mem) {
		if s.diskDir != "" {
			s.note(0, "maximum_object_size_in_memory %s is more than the memory cache (%d bytes): peerd keeps its default", s.maxInMemory, mem)
		}
		// Without a cache_dir, max_object bounds the memory cache.
		s.maxInMemory = ""
	}
}

// sizeBytes reads what squidSize wrote.
func sizeBytes(v string) int64 {
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	n, _ := strconv.ParseInt(v[:i], 10, 64)
	switch v[i:] {
	case "KiB":
		n <<= 10
	case "MiB":
		n <<= 20
	case "GiB":
		n <<= 30
	}
	return n
}

// squidDuration reads Squid's "N [units]" (seconds when no unit).
func squidDuration(w []string) (time.Duration, error) {
	if len(w) == 0 {
		return 0, fmt.Errorf("missing a time")
	}
	v, err := strconv.ParseFloat(w[0], 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a time", strings.Join(w, " "))
	}
	unit := time.Second
	if len(w) > 1 {
		switch strings.TrimSuffix(strings.ToLower(w[1]), "s") {
		case "second", "sec":
			unit = time.Second
		case "minute", "min":
			unit = time.Minute
		case "hour":
			unit = time.Hour
		case "day":
			unit = 24 * time.Hour
		case "millisecond", "m":
			unit = time.Millisecond
		default:
			return 0, fmt.Errorf("unknown time unit %q", w[1])
		}
	}
	return time.Duration(v * float64(unit)), nil
}

// squidSize reads Squid's "N [units]" (KB when no unit; Squid's KB and
// MB are binary) into a peerd size.
func squidSize(w []string) (string, error) {
	if len(w) == 0 {
		return "", fmt.Errorf("missing a size")
	}
	v, err := strconv.ParseInt(w[0], 10, 64)
	if err != nil || v < 0 {
		return "", fmt.Errorf("%q is not a size", strings.Join(w, " "))
	}
	unit := "KiB"
	if len(w) > 1 {
		switch strings.ToUpper(w[1]) {
		case "BYTES", "B":
			unit = ""
		case "KB":
			unit = "KiB"
		case "MB":
			unit = "MiB"
		case "GB":
			unit = "GiB"
		default:
			return "", fmt.Errorf("unknown size unit %q", w[1])
		}
	}
	return strconv.FormatInt(v, 10) + unit, nil
}

// refreshPattern reads "refresh_pattern [-i] REGEX MIN PERCENT% MAX
// [OPTIONS]" into [cache] refresh_patterns (a last catch-all "." with
// MIN 0 into heuristic_percent and heuristic_max instead). "^ftp:" and
// "^gopher:" never match a URL peerd fetches (it refuses those schemes).
// refresh-ims carries over (refresh_ims). The other options
// (override-expire, ignore-private, ...) break RFC 9111, which peerd does
// not: they are listed, and the pattern carries over without them, so
// that what it says of responses that state no freshness still holds in
// its place in the order. Expressions RE2 cannot read are listed.
func (s *squidImport) refreshPattern(n int, w []string) {
	all := strings.Join(w, " ")
	fold := false
	if len(w) > 0 && w[0] == "-i" {
		fold, w = true, w[1:]
	}
	if len(w) < 4 {
		s.note(n, "refresh_pattern %s: want REGEX MIN PERCENT MAX", all)
		return
	}
	if w[0] == "^ftp:" || w[0] == "^gopher:" {
		s.say("%s: refresh_pattern %s: dropped: peerd fetches no ftp:// or gopher:// URL, so it could never match", s.where(n), all)
		return
	}
	minMin, err1 := strconv.Atoi(w[1])
	pct, err2 := strconv.Atoi(strings.TrimSuffix(w[2], "%"))
	maxMin, err3 := strconv.Atoi(w[3])
	if err1 != nil || err2 != nil || err3 != nil || minMin < 0 || pct < 0 || pct > 100 || maxMin < minMin {
		s.note(n, "refresh_pattern %s: want MIN <= MAX minutes and a percent 0-100", all)
		return
	}
	ims := false
	var other []string
	for _, o := range w[4:] {
		if o == "refresh-ims" {
			ims = true
		} else {
			other = append(other, o)
		}
	}
	re := w[0]
	if fold {
		re = "(?i)" + re
	}
	if _, err := regexp.Compile(re); err != nil {
		s.note(n, "refresh_pattern %s: not an RE2 expression", all)
		return
	}
	if len(other) > 0 {
		s.note(n, "refresh_pattern %s: options %s (peerd keeps to RFC 9111; the pattern itself is carried over)", all, strings.Join(other, " "))
	}
	s.refresh = append(s.refresh, cache.RefreshPattern{Pattern: re, Min: time.Duration(minMin) * time.Minute,
		Percent: pct, Max: time.Duration(maxMin) * time.Minute, RefreshIMS: ims})
}

// refreshDefaults moves a last catch-all "." with MIN 0 into the
// heuristic defaults (the patterns before it come first either way).
func (s *squidImport) refreshDefaults() {
	n := len(s.refresh)
	if n == 0 {
		return
	}
	if last := s.refresh[n-1]; last.Pattern == "." && last.Min == 0 {
		s.heuristicPercent, s.heuristicMax, s.heuristicSet = last.Percent, last.Max, true
		s.refresh = s.refresh[:n-1]
	}
}

// Where an imported config keeps its store and its access log: peerd's
// own directories (the systemd unit's CacheDirectory and LogsDirectory),
// never Squid's spool or log, which Squid beside peerd may still use.
const (
	peerdDisk      = "/var/cache/peerd"
	peerdAccessLog = "/var/log/peerd/access.log"
)

// cacheDir reads "cache_dir TYPE PATH MBYTES [L1 L2] [OPTIONS]" into
// [cache] disk_size, the store in peerd's own directory (peerdDisk): the
// type (ufs, aufs, diskd, rock) and its options do not matter to peerd's
// store. peerd has one disk store; a
// second cache_dir is noted. "null" is Squid's no-disk store.
func (s *squidImport) cacheDir(n int, w []string) error {
	if len(w) >= 1 && w[0] == "null" {
		return nil
	}
	if len(w) < 3 {
		return fmt.Errorf("cache_dir needs a type, a path and a size in megabytes")
	}
	mb, err := strconv.ParseInt(w[2], 10, 64)
	if err != nil || mb <= 0 {
		return fmt.Errorf("cache_dir %s: %q is not a size in megabytes", w[1], w[2])
	}
	if s.diskDir != "" {
		s.note(n, "cache_dir %s: peerd has one disk store, %s (this one's %d MB are not added)", w[1], s.diskDir, mb)
		return nil
	}
	s.diskDir, s.diskSize = w[1], strconv.FormatInt(mb, 10)+"MiB"
	s.say("%s: cache_dir %s: Squid's spool stays Squid's: peerd keeps its own store of the same %d MB in %s (the systemd unit's CacheDirectory)", s.where(n), w[1], mb, peerdDisk)
	return nil
}
