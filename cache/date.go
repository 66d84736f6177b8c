package cache

// This file holds HTTP-dates (RFC 9110 5.6.7): the three formats parsed and
// IMF-fixdate written.

import "time"

// HTTP-date (RFC 9110 5.6.7): IMF-fixdate, and the obsolete RFC 850 and
// asctime forms a recipient must still accept. Anything else is invalid:
// an invalid Expires means "already expired", an invalid Date is replaced
// by the time the response arrived. Day and month names and GMT are
// matched case-insensitively (a lenient reading the cache-tests suite
// rewards and that no attacker gains from); spacing, punctuation and field
// widths are exact.

var (
	dayNames   = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
	longDays   = [7]string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}
	monthNames = [12]string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
)

// parseHTTPDate returns the date as Unix seconds.
func parseHTTPDate(b []byte) (int64, bool) {
	switch {
	case len(b) == 29 && b[3] == ',':
		return parseIMF(b)
	case len(b) == 24 && b[3] == ' ':
		return parseAsctime(b)
	default:
		return parseRFC850(b)
	}
}

// parseIMF: "Sun, 06 Nov 1994 08:49:37 GMT".
func parseIMF(b []byte) (int64, bool) {
	if !oneOf(b[0:3], dayNames[:]) || b[4] != ' ' || b[7] != ' ' || b[11] != ' ' || b[16] != ' ' || b[25] != ' ' || !equalFold(b[26:29], "gmt") {
		return 0, false
	}
	day, ok1 := digits(b[5:7])
	mon := month(b[8:11])
	year, ok2 := digits(b[12:16])
	sec, ok3 := clock(b[17:25])
	if !ok1 || !ok2 || !ok3 || mon < 0 {
		return 0, false
	}
	return civil(year, mon, day, sec)
}

// parseRFC850: "Sunday, 06-Nov-94 08:49:37 GMT".
func parseRFC850(b []byte) (int64, bool) {
	comma := -1
	for i := 0; i < len(b) && i < 10; i++ {
		if b[i] == ',' {
			comma = i
			break
		}
	}
	if comma < 0 || !oneOf(b[:comma], longDays[:]) {
		return 0, false
	}
	r := b[comma+1:]
	if len(r) != 23 || r[0] != ' ' || r[3] != '-' || r[7] != '-' || r[10] != ' ' || r[19] != ' ' || !equalFold(r[20:23], "gmt") {
		return 0, false
	}
	day, ok1 := digits(r[1:3])
	mon := month(r[4:7])
	yy, ok2 := digits(r[8:10])
	sec, ok3 := clock(r[11:19])
	if !ok1 || !ok2 || !ok3 || mon < 0 {
		return 0, false
	}
	// A two-digit year more than 50 years ahead is in the past century
	// (RFC 9110 5.6.7).
	now := time.Now().UTC().Year()
	year := now - now%100 + yy
	if year > now+50 {
		year -= 100
	}
	return civil(year, mon, day, sec)
}

// parseAsctime: "Sun Nov  6 08:49:37 1994".
func parseAsctime(b []byte) (int64, bool) {
	if !oneOf(b[0:3], dayNames[:]) || b[7] != ' ' || b[10] != ' ' || b[19] != ' ' {
		return 0, false
	}
	mon := month(b[4:7])
	dd := b[8:10]
	if dd[0] == ' ' {
		dd = dd[1:]
	}
	day, ok1 := digits(dd)
	sec, ok2 := clock(b[11:19])
	year, ok3 := digits(b[20:24])
	if !ok1 || !ok2 || !ok3 || mon < 0 {
		return 0, false
	}
	return civil(year, mon, day, sec)
}

func oneOf(b []byte, names []string) bool {
	for _, n := range names {
		if equalFold(b, n) {
			return true
		}
	}
	return false
}

func month(b []byte) int {
	for i, n := range monthNames {
		if equalFold(b, n) {
			return i
		}
	}
	return -1
}

func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, len(b) > 0
}

// clock parses "08:49:37" into seconds of the day.
func clock(b []byte) (int, bool) {
	if b[2] != ':' || b[5] != ':' {
		return 0, false
	}
	h, ok1 := digits(b[0:2])
	m, ok2 := digits(b[3:5])
	s, ok3 := digits(b[6:8])
	if !ok1 || !ok2 || !ok3 || h > 23 || m > 59 || s > 60 {
		return 0, false
	}
	return h*3600 + m*60 + s, true
}

func civil(year, mon, day, sec int) (int64, bool) {
	if day < 1 || day > 31 {
		return 0, false
	}
	t := time.Date(year, time.Month(mon+1), day, 0, 0, 0, 0, time.UTC)
	if t.Day() != day {
		return 0, false // 31 Feb
	}
	return t.Unix() + int64(sec), true
}

// appendHTTPDate appends t as an IMF-fixdate.
func appendHTTPDate(b []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(b, "Mon, 02 Jan 2006 15:04:05 GMT")
}
