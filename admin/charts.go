package admin

// This file holds the status page's charts: each peer's last 15 minutes
// (request rate, error rate, p50 and p99 response-head time) drawn as
// inline SVG by the server, so that the page needs no script and fetches
// nothing from elsewhere.

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/peerd/peerd/peers"
)

// chartWindow is what the charts show.
const chartWindow = 15 * time.Minute

// chartW and chartH are a chart's size in pixels.
const (
	chartW = 180
	chartH = 36
)

// line is one series of a chart.
type line struct {
	values []float64
	class  string
}

// chart draws lines (sharing one scale from 0 to their largest value)
// with a caption of the last value of each, in unit.
func chart(title, unit string, lines ...line) template.HTML {
	top := 0.0
	for _, l := range lines {
		for _, v := range l.values {
			top = max(top, v)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`, chartW, chartH, chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<title>%s, last 15 minutes (max %s)</title>`, template.HTMLEscapeString(title), fmtValue(top, unit))
	b.WriteString(`<line class="axis" x1="0" y1="35.5" x2="180" y2="35.5"/>`)
	// The scale: the top of the chart is the window's largest value, and
	// the chart says so (a flat line at 0.2/s and one at 200/s look alike).
	b.WriteString(`<line class="axis top" x1="0" y1="4.5" x2="180" y2="4.5"/>`)
	fmt.Fprintf(&b, `<text class="max" x="178" y="12" text-anchor="end">max %s</text>`, template.HTMLEscapeString(fmtValue(top, unit)))
	for _, l := range lines {
		if len(l.values) == 0 {
			continue
		}
		fmt.Fprintf(&b, `<polyline class="%s" points="`, l.class)
		step := float64(chartW) / float64(max(len(l.values)-1, 1))
		for i, v := range l.values {
			y := float64(chartH - 2)
			if top > 0 {
				y = float64(chartH-2) - v/top*float64(chartH-6)
			}
			fmt.Fprintf(&b, "%.1f,%.1f ", float64(i)*step, y)
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`</svg>`)
	var caption []string
	for _, l := range lines {
		if len(l.values) > 0 {
			caption = append(caption, fmtValue(l.values[len(l.values)-1], unit))
		}
	}
	fmt.Fprintf(&b, `<span class="caption">%s: %s</span>`, template.HTMLEscapeString(title), template.HTMLEscapeString(strings.Join(caption, " / ")))
	return template.HTML(b.String())
}

func fmtValue(v float64, unit string) string {
	switch {
	case unit == "ms" && v >= 1000:
		return fmt.Sprintf("%.2f s", v/1000)
	case v >= 100 || v == 0:
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// peerCharts are a peer's three charts.
func peerCharts(p *peers.Peer, now time.Time) []template.HTML {
	pts := p.Health().Recent(now, chartWindow)
	reqs := make([]float64, len(pts))
	errs := make([]float64, len(pts))
	p50 := make([]float64, len(pts))
	p99 := make([]float64, len(pts))
	per := peers.SlotWidth.Seconds()
	for i, pt := range pts {
		reqs[i] = float64(pt.Requests) / per
		errs[i] = float64(pt.Errors) / per
		p50[i] = float64(pt.P50) / float64(time.Millisecond)
		p99[i] = float64(pt.P99) / float64(time.Millisecond)
	}
	return []template.HTML{
		chart("requests", "/s", line{reqs, "req"}),
		chart("errors", "/s", line{errs, "err"}),
		chart("head time p50 / p99", "ms", line{p50, "p50"}, line{p99, "p99"}),
	}
}

// roundAge is a duration as a person reads it: 4s, 3m12s, 2h5m.
func roundAge(d time.Duration) string {
	if d < time.Hour {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// Facts are what the status page says of the process besides its peers.
type Facts struct {
	Policy   string
	Started  time.Time
	ReloadOK bool
	ReloadAt time.Time
}
