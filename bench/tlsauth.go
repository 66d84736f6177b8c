package main

// This file holds section 8, TLS and Basic authentication (issue 25):
// peerd and Squid as the child of a parent reached over TLS (keep-alive,
// and a new TLS connection for every request: the parent answers
// Connection: close), and peerd and Squid checking Basic credentials
// (SHA-512-crypt) on every request, each beside the same child without
// them, in interleaved rounds.

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/peerd/peerd/internal/testbed"
)

// The section's targets.
const (
	tlsPeerdKA    = "peerd → TLS parent, keep-alive"
	tlsSquidKA    = "squid → TLS parent, keep-alive"
	tlsPeerdNew   = "peerd → TLS parent, new connection each request"
	tlsSquidNew   = "squid → TLS parent, new connection each request"
	tlsPeerdPlain = "peerd → plain parent (baseline)"
	tlsSquidPlain = "squid → plain parent (baseline)"
	authPeerd     = "peerd with Basic auth"
	authSquid     = "squid with Basic auth (basic_ncsa_auth)"
	authPeerdOff  = "peerd without auth (baseline)"
	authSquidOff  = "squid without auth (baseline)"
)

// benchUser is a SHA-512-crypt htpasswd line: carol / s3cret-512.
const benchUser = `carol:$6$saltsalt$Vd2b/4Dxg.2QfZEXUzBTWCPk7eyodBwe9Y1uDVney3aHpmOzQhTuZJtKMY1uJH3BDnIJkk.d5TRGUEcZTtKNW.`

// loadUser, when set, makes the load generators send Basic credentials.
var loadUser *url.Userinfo

func tlsRun(work, peerdBin, squidBin string) []Throughput {
	dir, _ := os.MkdirTemp(work, "tls-")
	os.Chmod(dir, 0o755)
	ca, cert, key, err := testbed.WriteCA(dir, "parent.test")
	must(err)
	plain := newParent("plain")
	defer plain.Close()
	closing := newParent("closing")
	defer closing.Close()
	closing.SetHeader("Connection", "close")
	ka := tlsFront(plain.Addr, cert, key)
	defer ka.Close()
	nc := tlsFront(closing.Addr, cert, key)
	defer nc.Close()
	peerTLS := fmt.Sprintf("tls = true\ntls_ca = %q\ntls_name = \"parent.test\"\n", ca)
	squidTLS := fmt.Sprintf(" tls tls-cafile=%s tls-domain=parent.test", ca)
	targets := []tgt{
		{name: tlsPeerdPlain, start: func() *child { return startPeerdWith(work, peerdBin, []hop{hopOf(plain)}, "", "") }},
		{name: tlsPeerdKA, start: func() *child {
			return startPeerdWith(work, peerdBin, []hop{{name: "tls", port: portOf(ka.Addr().String())}}, "", peerTLS)
		}},
		{name: tlsPeerdNew, start: func() *child {
			return startPeerdWith(work, peerdBin, []hop{{name: "tls", port: portOf(nc.Addr().String())}}, "", peerTLS)
		}},
	}
	if squidBin != "" {
		targets = append(targets,
			tgt{name: tlsSquidPlain, start: func() *child { return startSquidWith(work, squidBin, []hop{hopOf(plain)}, "", "") }},
			tgt{name: tlsSquidKA, start: func() *child {
				return startSquidWith(work, squidBin, []hop{{name: "tls", port: portOf(ka.Addr().String())}}, squidTLS, "")
			}},
			tgt{name: tlsSquidNew, start: func() *child {
				return startSquidWith(work, squidBin, []hop{{name: "tls", port: portOf(nc.Addr().String())}}, squidTLS, "")
			}})
	}
	return runRounds(targets, "", false)
}

func authRun(work, peerdBin, squidBin string) []Throughput {
	dir, _ := os.MkdirTemp(work, "auth-")
	os.Chmod(dir, 0o755)
	users := filepath.Join(dir, "users")
	must(os.WriteFile(users, []byte(benchUser+"\n"), 0o644))
	par := newParent("parent")
	defer par.Close()
	hops := []hop{hopOf(par)}
	saved := wrkBin
	wrkBin = "" // the Go loader sends the credentials
	defer func() { wrkBin, loadUser = saved, nil }()
	loadUser = url.UserPassword("carol", "s3cret-512")
	targets := []tgt{
		{name: authPeerdOff, start: func() *child { return startPeerdWith(work, peerdBin, hops, "", "") }},
		{name: authPeerd, start: func() *child {
			return startPeerdWith(work, peerdBin, hops, fmt.Sprintf("[auth]\nbasic_users = %q\n", users), "")
		}},
	}
	if squidBin != "" {
		targets = append(targets,
			tgt{name: authSquidOff, start: func() *child { return startSquidWith(work, squidBin, hops, "", "") }},
			tgt{name: authSquid, start: func() *child {
				return startSquidWith(work, squidBin, hops, "", fmt.Sprintf(
					"auth_param basic program /usr/lib/squid/basic_ncsa_auth %s\nauth_param basic children 5\nacl users proxy_auth REQUIRED\nhttp_access deny !users\n", users))
			}})
	}
	return runRounds(targets, "", false)
}

// tlsFront terminates TLS in front of a plain parent: each connection is
// relayed to a new connection to the parent. TLS 1.2: Debian's Squid 5.7
// (GnuTLS) as a TLS client fails every request against a TLS 1.3 Go
// server (ERR_READ_ERROR), and both children must meet the same parent.
func tlsFront(parent, certPath, keyPath string) net.Listener {
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	must(err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MaxVersion: tls.VersionTLS12})
	must(err)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				p, err := net.Dial("tcp", parent)
				if err != nil {
					return
				}
				defer p.Close()
				go func() { io.Copy(p, c); p.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, p)
			}()
		}
	}()
	return ln
}

// tlsAuthSection renders sections 8 and 9.
func (r *Results) tlsAuthSection() string {
	var b strings.Builder
	table := func(title string, rows []Throughput, pairs [][3]string) {
		if len(rows) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n## %s, %d connections, %s per target, median of %d interleaved rounds\n\n| path | req/s | child CPU %% | CPU µs per request | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|---:|---:|\n", title, *conns, *duration, max(1, *rounds))
		by := map[string]*Throughput{}
		for i := range rows {
			t := &rows[i]
			by[t.Target] = t
			fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.1f | %.2f | %.2f | %d |\n", t.Target, t.RPS, t.CPUPct, t.CPUusPerReq, t.P50ms, t.P99ms, t.Errors)
		}
		b.WriteString("\nCPU per request, peerd / squid:")
		for _, p := range pairs {
			if x, y := by[p[1]], by[p[2]]; x != nil && y != nil {
				fmt.Fprintf(&b, " %s %s;", p[0], ratio(x.CPUusPerReq, y.CPUusPerReq))
			}
		}
		b.WriteString("\n")
	}
	table("8. Through a TLS parent (TLS 1.2, ECDSA P-256; the parent answers Connection: close in the new-connection rows)", r.TLS,
		[][3]string{{"plain", tlsPeerdPlain, tlsSquidPlain}, {"TLS keep-alive", tlsPeerdKA, tlsSquidKA}, {"TLS new connections", tlsPeerdNew, tlsSquidNew}})
	table("9. Basic authentication on every request (SHA-512-crypt users; peerd caches a verified credential 1 min, Squid credentialsttl 2 h)", r.Auth,
		[][3]string{{"no auth", authPeerdOff, authSquidOff}, {"Basic auth", authPeerd, authSquid}})
	return b.String()
}
