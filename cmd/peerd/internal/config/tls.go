package config

// This file holds the TLS client configurations of the peers that speak
// TLS (contract section 18): their CA bundle, the name verified and sent
// as SNI, a client certificate, and a session cache so that a reconnect
// resumes instead of paying a full handshake. Files that cannot be read
// or parsed are config errors (-check), and a reload that cannot load
// them keeps the running ones.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/peers"
)

// PeerTLS is the TLS client config of each peer that speaks TLS, by name.
type PeerTLS map[string]*tls.Config

// BuildPeerTLS reads every TLS peer's files; errors name the peer and
// the key.
func BuildPeerTLS(specs []peers.Spec) (PeerTLS, error) {
	out := PeerTLS{}
	var es conf.Errors
	for i, s := range specs {
		if !s.TLS {
			continue
		}
		bad := func(key, format string, args ...any) {
			es.Add(&conf.Error{Section: "peer", Index: i, Name: s.Name, Key: key, Msg: fmt.Sprintf(format, args...)})
		}
		cfg := &tls.Config{
			MinVersion:         tls.VersionTLS12,
			ServerName:         s.TLSName,
			NextProtos:         []string{"http/1.1"},
			ClientSessionCache: tls.NewLRUClientSessionCache(64),
		}
		if cfg.ServerName == "" {
			cfg.ServerName = s.Host
		}
		if s.TLSCA != "" {
			pem, err := os.ReadFile(s.TLSCA)
			switch {
			case err != nil:
				bad("tls_ca", "%v", err)
			default:
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					bad("tls_ca", "%s holds no PEM certificate", s.TLSCA)
				}
				cfg.RootCAs = pool
			}
		}
		if s.TLSCert != "" && s.TLSKey != "" {
			cert, err := tls.LoadX509KeyPair(s.TLSCert, s.TLSKey)
			if err != nil {
				bad("tls_cert", "%v", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		out[s.Name] = cfg
	}
	return out, es.Err()
}

// checkClientTLS is the -check of [proxy] tls_cert and tls_key.
func checkClientTLS(certPath, keyPath string) error {
	if certPath == "" || keyPath == "" {
		return nil
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		return &conf.Error{Section: "proxy", Key: "tls_cert", Msg: err.Error()}
	}
	return nil
}
