package dialer

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

type fakeResolver struct {
	addrs []netip.Addr
	err   error
}

func (r *fakeResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r.addrs, r.err
}

func setup(t *testing.T, host string) (*peers.Registry, *peers.Peer, *test.Hook) {
	log, hook := test.NewNullLogger()
	h := peers.DefaultConfig()
	reg, err := peers.New(peers.Options{Health: h, ConnectTimeout: time.Second, Log: log}, []peers.Spec{{Name: "p", Host: host, Port: 3128}})
	if err != nil {
		t.Fatal(err)
	}
	p := reg.Get("p")
	reg.Observe(p, peers.Outcome{At: time.Now(), Probe: true})
	return reg, p, hook
}

func TestOutcomesAreReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, p, _ := setup(t, "127.0.0.1")
		var mode string
		d := &Dialer{Reporter: reg, Dial: func(ctx context.Context, _, addr string) (net.Conn, error) {
			switch mode {
			case "refuse":
				return nil, errors.New("connection refused")
			case "hang":
				<-ctx.Done()
				return nil, ctx.Err()
			}
			time.Sleep(3 * time.Millisecond)
			c, _ := net.Pipe()
			return c, nil
		}}
		conn, err := d.DialPeer(context.Background(), p, Traffic, 0)
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if st := p.Health().Snapshot(); st.ConnectsTotal != 2 || st.ConnectTime == 0 {
			t.Fatalf("success not recorded: %+v", st)
		}
		mode = "refuse"
		_, err = d.DialPeer(context.Background(), p, Traffic, 0)
		var ce *ConnectError
		if !errors.As(err, &ce) || p.Health().Snapshot().ConnectFailuresTotal != 1 {
			t.Fatalf("refused: err %v, failures %d", err, p.Health().Snapshot().ConnectFailuresTotal)
		}
		mode = "hang"
		start := time.Now()
		_, err = d.DialPeer(context.Background(), p, Traffic, 0)
		if time.Since(start) != time.Second || !strings.Contains(err.Error(), "connect timeout after 1s") {
			t.Fatalf("timeout: %v after %v", err, time.Since(start))
		}
		if p.Health().Snapshot().ConnectFailuresTotal != 2 {
			t.Fatal("timeout not counted")
		}
		// A caller that gives up is not the peer's failure.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := d.DialPeer(ctx, p, Traffic, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
		if st := p.Health().Snapshot(); st.ConnectFailuresTotal != 2 || st.ConnectsTotal != 4 {
			t.Fatalf("a caller going away was counted: %+v", st)
		}
	})
}

func TestDNSFailureFallsBackToLastKnownAddress(t *testing.T) {
	reg, p, hook := setup(t, "parent.example")
	res := &fakeResolver{addrs: []netip.Addr{netip.MustParseAddr("127.0.0.9")}}
	var dialled []string
	d := &Dialer{Reporter: reg, Resolver: res, Log: hook2logger(hook), Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
		dialled = append(dialled, addr)
		c, _ := net.Pipe()
		return c, nil
	}}
	if _, err := d.DialPeer(context.Background(), p, Traffic, 0); err != nil {
		t.Fatal(err)
	}
	res.addrs, res.err = nil, errors.New("no such host")
	if _, err := d.DialPeer(context.Background(), p, Traffic, 0); err != nil {
		t.Fatalf("with a known address, a DNS failure must not fail the connect: %v", err)
	}
	if len(dialled) != 2 || dialled[1] != "127.0.0.9:3128" {
		t.Fatalf("dialled %v", dialled)
	}
	if e := hook.LastEntry(); e == nil || e.Level != logrus.WarnLevel {
		t.Fatal("no warning logged for the DNS fallback")
	}
	// Without a known address a DNS failure is a connect failure.
	reg2, p2, _ := setup(t, "other.example")
	d2 := &Dialer{Reporter: reg2, Resolver: res}
	if _, err := d2.DialPeer(context.Background(), p2, Traffic, 0); err == nil || !strings.Contains(err.Error(), "dns") {
		t.Fatalf("err = %v; want a dns connect failure", err)
	}
	if p2.Health().Snapshot().ConnectFailuresTotal != 1 {
		t.Fatal("DNS failure not counted")
	}
}

func hook2logger(h *test.Hook) logrus.FieldLogger {
	l := logrus.New()
	l.AddHook(h)
	l.Out = nopWriter{}
	return l
}

type nopWriter struct{}

func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
