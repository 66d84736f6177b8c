package main

// This file holds import-squid's reading of Squid's durations and sizes,
// the fitting of maximum_object_size to peerd's memory cache, and
// refresh_pattern where peerd has an equivalent.

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/peerd/peerd/cache"
)

// fitMaxObject drops a maximum_object_size larger than the memory cache:
// Squid's applies to its disk cache too, and peerd refuses a max_object
// over [cache] memory.
func (s *squidImport) fitMaxObject() {
	if s.maxObject == "" {
		return
	}
	mem := int64(cache.DefaultConfig().Memory)
	if s.cacheMem != "" {
		mem = sizeBytes(s.cacheMem)
	}
	if sizeBytes(s.maxObject) > mem {
		s.note(0, "maximum_object_size %s is more than the memory cache (%d bytes): peerd keeps its default max_object", s.maxObject, mem)
		s.maxObject = ""
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
// [OPTIONS]". The catch-all "." is [cache] heuristic_percent and
// heuristic_max (with MIN 0 and no options); "^ftp:" and "^gopher:" never
// match a URL peerd fetches (it refuses those schemes). Anything else is
// listed.
func (s *squidImport) refreshPattern(n int, w []string) {
	all := strings.Join(w, " ")
	if len(w) > 0 && w[0] == "-i" {
		w = w[1:]
	}
	if len(w) < 4 {
		s.note(n, "refresh_pattern %s: want REGEX MIN PERCENT MAX", all)
		return
	}
	switch w[0] {
	case "^ftp:", "^gopher:":
		return
	case ".":
		pct, err := strconv.Atoi(strings.TrimSuffix(w[2], "%"))
		maxMin, err2 := strconv.Atoi(w[3])
		if w[1] != "0" || len(w) > 4 || err != nil || err2 != nil || pct < 0 || pct > 100 || maxMin < 0 {
			s.note(n, "refresh_pattern %s: peerd's heuristic freshness has no minimum and no options", all)
			return
		}
		s.heuristicPercent, s.heuristicMax = pct, time.Duration(maxMin)*time.Minute
		s.heuristicSet = true
		return
	}
	s.note(n, "refresh_pattern %s: peerd has one heuristic for every URL", all)
}
