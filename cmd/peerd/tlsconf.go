package main

// This file holds the TLS client configurations of the peers that speak
// TLS (contract section 18): their CA bundle, the name verified and sent
// as SNI, a client certificate, and a session cache so that a reconnect
// resumes instead of paying a full handshake. Files that cannot be read
// or parsed are config errors (-check), and a reload that cannot load
// them keeps the running ones.

import (
	"crypto/tls"
	"fmt"
	"sync/atomic"
)

// clientTLS is the proxy's own certificate for its TLS listener, swapped
// whole on reload (connections already open keep theirs).
type clientTLS struct {
	cert atomic.Pointer[tls.Certificate]
}

// load reads the certificate and key; the running one stays on an error.
func (c *clientTLS) load(certPath, keyPath string) error {
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return fmt.Errorf("proxy.tls_cert: %w", err)
	}
	c.cert.Store(&cert)
	return nil
}

// config is the listener's TLS config: the current certificate on every
// handshake, ALPN http/1.1.
func (c *clientTLS) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.cert.Load(), nil
		},
	}
}
