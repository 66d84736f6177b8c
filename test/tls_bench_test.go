package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

// BenchmarkTLSConnect: a new TLS connection to a parent with a full
// handshake every time, and with the session cache peerd keeps per peer
// (a reconnect resumes). Loopback, ECDSA P-256, TLS 1.3.
func BenchmarkTLSConnect(b *testing.B) {
	dir := b.TempDir()
	t := &testing.T{}
	caPath, certPath, keyPath := testCA(t, dir, "parent.test")
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.(*tls.Conn).Handshake()
				c.Write([]byte{1}) // carries the session ticket
				buf := make([]byte, 1)
				c.Read(buf)
			}()
		}
	}()
	pem, _ := os.ReadFile(caPath)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	connect := func(b *testing.B, cfg *tls.Config) {
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 1)
		c.Read(buf)
		c.Close()
	}
	b.Run("full-handshake", func(b *testing.B) {
		cfg := &tls.Config{RootCAs: pool, ServerName: "parent.test"}
		for b.Loop() {
			connect(b, cfg)
		}
	})
	b.Run("resumed", func(b *testing.B) {
		cfg := &tls.Config{RootCAs: pool, ServerName: "parent.test", ClientSessionCache: tls.NewLRUClientSessionCache(64)}
		connect(b, cfg)
		resumed := 0
		for b.Loop() {
			c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			if c.ConnectionState().DidResume {
				resumed++
			}
			buf := make([]byte, 1)
			c.Read(buf)
			c.Close()
		}
		if resumed == 0 {
			b.Fatal("no connection resumed its session")
		}
	})
}
