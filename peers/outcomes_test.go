package peers

// This file holds the tests' shorthands for the outcomes they report.

import "time"

// observeAnswer reports an answer about no known origin.
func observeAnswer(r *Registry, p *Peer, c AnswerClass, firstByte time.Duration, at time.Time) {
	r.Observe(p, Outcome{Event: Answered, Class: c, FirstByte: firstByte, At: at})
}

// observeAnswerFrom reports an answer about origin.
func observeAnswerFrom(r *Registry, p *Peer, c AnswerClass, firstByte time.Duration, at time.Time, origin uint32) {
	r.Observe(p, Outcome{Event: Answered, Class: c, FirstByte: firstByte, At: at, Origin: origin})
}

// observeHTTPProbe reports an HTTP probe: good (ok), or failed with err
// of class c.
func observeHTTPProbe(r *Registry, p *Peer, ok bool, err error, c AnswerClass, at time.Time) {
	if ok {
		c = AnswerOK
	}
	r.Observe(p, Outcome{Event: HTTPProbed, Class: c, Err: err, At: at})
}

// suspectBy reports another's word that p is down, and whether p's row
// changed for it.
func suspectBy(r *Registry, p *Peer, cause, detail string) bool {
	was := p.health.row.Load()
	r.Observe(p, Outcome{Event: Reported, Cause: cause, Detail: detail})
	return p.health.row.Load() != was
}
