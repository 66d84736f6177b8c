package e2e

// Gray failures through the binary (issue 22): a parent that accepts
// connections but hangs, answers late, or answers its own errors is found
// by its answers, costs clients (almost) nothing, is declared dead, and is
// revived only by an HTTP probe once it recovers; a slow origin behind
// every parent blames none.

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

type grayStatus struct {
	State                 string           `json:"state"`
	Suspect               bool             `json:"suspect"`
	DeadCause             *string          `json:"dead_cause"`
	Probe                 string           `json:"probe"`
	AnswerFailuresByClass map[string]int64 `json:"answer_failures_by_class"`
	HedgedTotal           int64            `json:"hedged_total"`
	FirstByteTimeoutMs    float64          `json:"first_byte_timeout_ms"`
}

func (p *peerd) gray(name string) grayStatus {
	p.t.Helper()
	var st grayStatus
	p.adminJSON("GET", "/peers/"+name, "", &st)
	return st
}

// loadResult is what a paced load saw.
type loadResult struct {
	n, errs, slow int
	worst         time.Duration
	firstErr      string
}

// paced sends rate requests a second for d (bounded: at most rate*d
// requests), each URL unique; slowEvery > 0 marks every slowEvery-th
// request slow at the origin (X-Delay, honoured by every parent alike).
func paced(p *peerd, rate int, d time.Duration, slowEvery int, slowDelay time.Duration) loadResult {
	return pacedTo(p, "origin.test", rate, d, slowEvery, slowDelay)
}

// pacedTo is paced with GETs for URLs on host.
func pacedTo(p *peerd, host string, rate int, d time.Duration, slowEvery int, slowDelay time.Duration) loadResult {
	var mu sync.Mutex
	var res loadResult
	var wg sync.WaitGroup
	cl := p.client()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/gray/%d/%d", host, time.Now().UnixNano(), i), nil)
			slow := slowEvery > 0 && i%slowEvery == 0
			if slow {
				req.Header.Set("X-Delay", slowDelay.String())
			}
			start := time.Now()
			resp, err := cl.Do(req)
			took := time.Since(start)
			ok := err == nil && resp.StatusCode == 200
			if resp != nil {
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			res.n++
			if !ok {
				res.errs++
				if res.firstErr == "" {
					res.firstErr = fmt.Sprint(err)
					if resp != nil {
						res.firstErr = fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("X-Peerd-Error"), " ", resp.Header.Get("Proxy-Status"))
					}
				}
			}
			if !slow {
				if took > time.Second {
					res.slow++
				}
				res.worst = max(res.worst, took)
			}
		}(i)
	}
	wg.Wait()
	return res
}

const grayConfig = `
[health]
probe_interval = "1s"
probe_max_interval = "5s"
`

func TestGrayFailurePhases(t *testing.T) {
	a, b, c := newFakeParent(t, "a"), newFakeParent(t, "b"), newFakeParent(t, "c")
	cfg := withProxy(baseConfig, `read_timeout = "10s"`) + grayConfig + policy("round-robin") + peerBlock("", a, b, c)
	p := startPeerd(t, cfg)
	// Warm up: every parent's head times are known.
	if r := paced(p, 100, 1500*time.Millisecond, 0, 0); r.errs != 0 {
		t.Fatalf("warm-up: %d errors (%s)", r.errs, r.firstErr)
	}
	for _, phase := range []struct {
		name  string
		fault func()
	}{
		{"hang", func() { a.setMode("silent") }},
		{"slow", func() { a.setMode("delay:3s") }},
		{"sick", func() {
			a.setStatus(503)
			a.SetHeader("Proxy-Status", "a; error=proxy_internal_error")
		}},
	} {
		t.Run(phase.name, func(t *testing.T) {
			deaths := p.peer("a").DeathsTotal
			phase.fault()
			start := time.Now()
			var getsAt1s atomic.Int64
			getsAt1s.Store(-1)
			time.AfterFunc(time.Second, func() { getsAt1s.Store(int64(a.requests("GET"))) })
			r := paced(p, 40, 6*time.Second, 0, 0)
			after1s := int64(a.requests("GET")) - getsAt1s.Load()
			st := p.gray("a")
			t.Logf("%s: %d requests, %d errors, %d over 1s (worst %v), a got %d GETs after the first second; a %s %v",
				phase.name, r.n, r.errs, r.slow, r.worst, after1s, st.State, st.AnswerFailuresByClass)
			if r.errs != 0 {
				t.Errorf("%d client errors (first: %s); want 0", r.errs, r.firstErr)
			}
			if r.slow > 0 {
				t.Errorf("%d requests waited over 1s (worst %v); want none: a parent that stopped answering is no tail to budget", r.slow, r.worst)
			}
			if after1s > 3 {
				t.Errorf("a got %d client requests after the first second of its fault; want at most 3", after1s)
			}
			if st.State != "dead" || st.DeadCause == nil || *st.DeadCause != "answer" || st.Probe != "http" {
				t.Fatalf("a = %+v after %v; want dead by answers, probed over HTTP", st, time.Since(start))
			}
			if phase.name != "sick" {
				var died time.Time
				for _, tr := range p.history("a") {
					if tr.To == "dead" && tr.At.After(start) {
						died = tr.At
						break
					}
				}
				if d := died.Sub(start); died.IsZero() || d > time.Second {
					t.Errorf("a dead %v after its fault began; want within 1s", d)
				}
			}
			// Recovery: an HTTP probe revives it within probe_max_interval,
			// plus the probe that may be in flight at the moment of
			// recovery (a late answer, bounded by the 2 s connect timeout)
			// and this test's polling.
			a.setMode("")
			a.setStatus(200)
			a.SetHeader("Proxy-Status", "")
			back := time.Now()
			waitFor(t, "a revived by an HTTP probe", 10*time.Second, func() bool { return p.peer("a").State == "alive" })
			if d := time.Since(back); d > 5*time.Second+2*time.Second+500*time.Millisecond {
				t.Errorf("revived %v after recovering; want within probe_max_interval (5s) and one probe in flight (2s)", d)
			}
			if p.peer("a").DeathsTotal != deaths+1 {
				t.Errorf("deaths %d; want one more", p.peer("a").DeathsTotal)
			}
			if n := a.requests("OPTIONS"); n == 0 {
				t.Error("a was never probed with OPTIONS")
			}
		})
	}
	// Control: the origin is slow for some URLs behind every parent: no
	// parent is blamed, and fast requests are not slowed.
	t.Run("control", func(t *testing.T) {
		before := map[string]int64{}
		for _, n := range []string{"a", "b", "c"} {
			before[n] = p.gray(n).AnswerFailuresByClass["late"]
		}
		r := paced(p, 40, 6*time.Second, 8, 2500*time.Millisecond)
		if r.errs != 0 {
			t.Errorf("%d client errors (first: %s)", r.errs, r.firstErr)
		}
		if r.slow > 0 {
			t.Errorf("%d fast requests waited over 1s (worst %v)", r.slow, r.worst)
		}
		for _, n := range []string{"a", "b", "c"} {
			if st := p.gray(n); st.State != "alive" || st.AnswerFailuresByClass["late"] != before[n] {
				t.Errorf("%s = %+v; a slow origin is no parent's fault", n, st)
			}
		}
	})
	if !strings.Contains(p.logs(), "Detected DEAD Parent: a (answers)") {
		t.Error("no 'Detected DEAD Parent: a (answers)' in the log")
	}
}

// TestSquidStoppedIsDeadByAnswers: a real Squid parent stopped with
// SIGSTOP accepts connections (the kernel's backlog) and never answers. It
// is declared dead by answers, gets no client request after the first
// second, is probed with OPTIONS (which Squid answers itself, HIER_NONE)
// and revived after SIGCONT.
func TestSquidStoppedIsDeadByAnswers(t *testing.T) {
	origin := newOrigin(t, originHandler)
	s1 := startSquid(t, "squid1", "")
	s2 := startSquid(t, "squid2", "")
	p := startPeerd(t, baseConfig+grayConfig+policy("round-robin")+peerBlock("", s1, s2))
	cl := p.client()
	for i := 0; i < 60; i++ {
		if r := do(cl, "GET", fmt.Sprintf("http://%s/warm/%d", origin, i), ""); r.status != 200 {
			t.Fatalf("warm-up: %s", r)
		}
	}
	if err := syscall.Kill(s1.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	cont := func() { syscall.Kill(s1.Pid(), syscall.SIGCONT) }
	defer cont()
	var wg sync.WaitGroup
	var errs atomic.Int64
	for i := 0; i < 100 && time.Since(stopped) < 5*time.Second; i++ {
		wg.Add(1)
		go func(ms int64) {
			defer wg.Done()
			if r := do(cl, "GET", fmt.Sprintf("http://%s/stopped/%d", origin, ms), ""); r.status != 200 {
				errs.Add(1)
			}
		}(time.Since(stopped).Milliseconds())
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	waitFor(t, "squid1 dead by answers", 10*time.Second, func() bool {
		st := p.gray("squid1")
		return st.State == "dead" && st.DeadCause != nil && *st.DeadCause == "answer"
	})
	if n := errs.Load(); n != 0 {
		t.Errorf("%d client errors while a parent was stopped", n)
	}
	cont()
	waitFor(t, "squid1 revived by an HTTP probe", 15*time.Second, func() bool { return p.peer("squid1").State == "alive" })
	// Squid's own log: the OPTIONS probes it answered itself, and no
	// client request sent to it after the first second of the stop.
	var options, late []string
	waitFor(t, "squid1 to log an OPTIONS probe", 10*time.Second, func() bool {
		options, late = nil, nil
		for _, l := range s1.accessLog() {
			if strings.Contains(l, " OPTIONS ") {
				options = append(options, l)
			}
			if i := strings.Index(l, "/stopped/"); i >= 0 {
				var ms int64
				fmt.Sscan(strings.Fields(l[i+len("/stopped/"):])[0], &ms)
				if ms > 1000 {
					late = append(late, l)
				}
			}
		}
		return len(options) > 0
	})
	if !strings.Contains(options[0], "HIER_NONE") || !strings.Contains(options[0], "NONE_NONE/501") && !strings.Contains(options[0], "/501") {
		t.Errorf("squid's log of the probe: %q; want it answered by Squid itself (NONE_NONE/501, HIER_NONE)", options[0])
	}
	if len(late) > 0 {
		t.Errorf("%d client requests sent to the stopped squid after its first second: %q", len(late), late)
	}
	t.Logf("squid1 answered %d OPTIONS probes itself, e.g. %s", len(options), options[0])
}
