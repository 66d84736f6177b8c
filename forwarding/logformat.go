package forwarding

// This file holds access_log_format: Squid's native line (the default and
// the fast path, accesslog.go), Apache's common and combined lines as
// Squid writes them, or a Squid logformat string made of the tokens peerd
// knows. A format is compiled once, at start and reload; an unknown token
// is a -check error naming it.

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Squid's built-in formats besides its native one.
const (
	formatCommon   = `%>a %[ui %[un [%tl] "%rm %ru HTTP/%rv" %>Hs %<st %Ss:%Sh`
	formatCombined = `%>a %[ui %[un [%tl] "%rm %ru HTTP/%rv" %>Hs %<st "%{Referer}>h" "%{User-Agent}>h" %Ss:%Sh`
)

// logToken is one %-code of a logformat.
type logToken uint8

const (
	tokLiteral    logToken = iota
	tokTS                  // %ts: seconds since the epoch
	tokTU                  // %tu: its milliseconds
	tokTR                  // %tr: response time in milliseconds
	tokTL                  // %tl: local time, 02/Jan/2006:15:04:05 -0700
	tokTG                  // %tg: the same in UTC
	tokClientIP            // %>a
	tokClientPort          // %>p
	tokResult              // %Ss: TCP_MISS, TCP_MEM_HIT, ...
	tokStatus              // %>Hs (and %<Hs): the status sent to the client
	tokSent                // %<st: bytes sent to the client
	tokReceived            // %>st: bytes received from the client
	tokMethod              // %rm
	tokURL                 // %ru
	tokPath                // %rp
	tokVersion             // %rv
	tokUser                // %un, %[un, %ul
	tokIdent               // %ui, %[ui: always "-"
	tokHier                // %Sh
	tokServer              // %<a, %<A: the peer's host, or the origin's
	tokMime                // %mt
	tokReqHeader           // %{Name}>h
	tokErr                 // %err_type: the RFC 9209 error type of an answer peerd made
)

// logCodes maps each code peerd knows to its token.
var logCodes = map[string]logToken{
	"ts": tokTS, "tu": tokTU, "tr": tokTR, "tl": tokTL, "tg": tokTG,
	">a": tokClientIP, ">p": tokClientPort, "Ss": tokResult, ">Hs": tokStatus, "<Hs": tokStatus,
	"<st": tokSent, ">st": tokReceived, "rm": tokMethod, "ru": tokURL, "rp": tokPath, "rv": tokVersion,
	"un": tokUser, "[un": tokUser, "ul": tokUser, "ui": tokIdent, "[ui": tokIdent, "Sh": tokHier,
	"<a": tokServer, "<A": tokServer, "mt": tokMime, ">h": tokReqHeader, "err_type": tokErr,
}

// logCodeList is every code, in the order the docs and errors give them
// (a test checks it holds every key of logCodes, and that
// docs/configuration.md gives the same list).
var logCodeList = []string{"%ts", "%tu", "%tr", "%tl", "%tg", "%>a", "%>p", "%Ss", "%>Hs", "%<Hs", "%<st", "%>st",
	"%rm", "%ru", "%rp", "%rv", "%un", "%[un", "%ul", "%ui", "%[ui", "%Sh", "%<a", "%<A", "%mt", "%{Header}>h", "%err_type"}

// logPart is a literal or a code with its width and argument.
type logPart struct {
	tok   logToken
	lit   string
	width int
	zero  bool   // pad with zeros
	arg   string // %{arg}>h
}

// LogFormat is a compiled access_log_format; nil is Squid's native line.
type LogFormat struct{ parts []logPart }

// CompileLogFormat reads "squid", "common", "combined" or a logformat
// string; nil for squid.
func CompileLogFormat(s string) (*LogFormat, error) {
	switch s {
	case "", "squid":
		return nil, nil
	case "common":
		s = formatCommon
	case "combined":
		s = formatCombined
	}
	f := &LogFormat{}
	lit := func(x string) {
		if n := len(f.parts); n > 0 && f.parts[n-1].tok == tokLiteral {
			f.parts[n-1].lit += x
			return
		}
		f.parts = append(f.parts, logPart{lit: x})
	}
	for i := 0; i < len(s); {
		if s[i] != '%' {
			j := strings.IndexByte(s[i:], '%')
			if j < 0 {
				j = len(s) - i
			}
			lit(s[i : i+j])
			i += j
			continue
		}
		i++
		if i < len(s) && s[i] == '%' {
			lit("%")
			i++
			continue
		}
		var p logPart
		if i < len(s) && s[i] == '-' {
			i++ // left-aligned: peerd pads on the left only; taken as no width
		}
		if i < len(s) && s[i] == '0' {
			p.zero = true
			i++
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			p.width = p.width*10 + int(s[i]-'0')
			i++
		}
		if i < len(s) && s[i] == '{' {
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%q: a %%{ without its }", s)
			}
			p.arg = s[i+1 : i+end]
			i += end + 1
		}
		code, ok := "", false
		for n := min(len(s)-i, 8); n > 0; n-- {
			if t, found := logCodes[s[i:i+n]]; found {
				code, p.tok, ok = s[i:i+n], t, true
				break
			}
		}
		if !ok {
			end := i
			for end < len(s) && s[end] != ' ' && s[end] != '%' && s[end] != '"' {
				end++
			}
			return nil, fmt.Errorf("%%%s is not a code peerd knows (it knows %s)", s[i:end], strings.Join(logCodeList, " "))
		}
		if (p.tok == tokReqHeader) != (p.arg != "") {
			return nil, fmt.Errorf("%%%s needs a header name: %%{Name}>h", code)
		}
		i += len(code)
		f.parts = append(f.parts, p)
	}
	return f, nil
}

// appendLine formats tx's line in f.
func (f *LogFormat) appendLine(b []byte, tx *txn, al *logView, elapsed time.Duration, hier string) []byte {
	end := tx.rq.start.Add(elapsed)
	for _, p := range f.parts {
		if p.tok == tokLiteral {
			b = append(b, p.lit...)
			continue
		}
		start := len(b)
		b = tx.appendCode(b, p, al, end, elapsed, hier)
		if n := len(b) - start; n < p.width {
			pad := byte(' ')
			if p.zero {
				pad = '0'
			}
			b = append(b, make([]byte, p.width-n)...)
			copy(b[start+p.width-n:], b[start:start+n])
			for k := start; k < start+p.width-n; k++ {
				b[k] = pad
			}
		}
	}
	return append(b, '\n')
}

// appendCode appends one code's value ("-" when there is none).
func (tx *txn) appendCode(b []byte, p logPart, al *logView, end time.Time, elapsed time.Duration, hier string) []byte {
	dash := func(v []byte) []byte {
		if len(v) == 0 {
			return append(b, '-')
		}
		return appendEscaped(b, v)
	}
	switch p.tok {
	case tokTS:
		return strconv.AppendInt(b, end.Unix(), 10)
	case tokTU:
		return strconv.AppendInt(b, int64(end.Nanosecond()/1e6), 10)
	case tokTR:
		return strconv.AppendInt(b, elapsed.Milliseconds(), 10)
	case tokTL:
		return end.Local().AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	case tokTG:
		return end.UTC().AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	case tokClientIP:
		return append(b, tx.rq.from.str...)
	case tokClientPort:
		if tx.rq.from.port == 0 {
			return append(b, '-')
		}
		return strconv.AppendUint(b, uint64(tx.rq.from.port), 10)
	case tokResult:
		return append(b, tx.result()...)
	case tokStatus:
		return appendPadded(b, int64(tx.w.status), 3, '0')
	case tokSent:
		return strconv.AppendInt(b, tx.sentBytes(), 10)
	case tokReceived:
		return strconv.AppendInt(b, tx.receivedBytes(), 10)
	case tokMethod:
		if tx.rq.method == "" {
			return append(b, "NONE"...)
		}
		return append(b, tx.rq.method...)
	case tokURL:
		return dash(al.loggedURL(tx.rq.req.Target))
	case tokPath:
		return dash(al.loggedURL(tx.rq.req.PathQuery))
	case tokVersion:
		if tx.rq.req.Minor == 0 && tx.rq.method != "" {
			return append(b, "1.0"...)
		}
		return append(b, "1.1"...)
	case tokUser:
		switch {
		case tx.rq.user != "":
			return appendEscaped(b, []byte(tx.rq.user))
		case tx.rq.claimed != "":
			return appendEscaped(b, []byte(tx.rq.claimed))
		}
		return append(b, '-')
	case tokIdent:
		return append(b, '-')
	case tokHier:
		if tx.icpTimedOut {
			b = append(b, "TIMEOUT_"...)
		}
		return append(b, hier...)
	case tokServer:
		switch {
		case !tx.hopped && !tx.errHop:
			return append(b, '-')
		case tx.hop.Peer != nil:
			return append(b, tx.hop.Peer.Host()...)
		}
		return dash(tx.rq.req.Host)
	case tokMime:
		return dash(tx.contentType())
	case tokReqHeader:
		return dash(tx.rq.req.Get(p.arg))
	case tokErr:
		return dash([]byte(tx.errType))
	}
	return append(b, '-')
}
