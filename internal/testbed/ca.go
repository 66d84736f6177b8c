package testbed

// This file holds WriteCA: a throw-away CA and a server certificate signed
// by it, for the TLS tests and the TLS bench.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// WriteCA makes a CA and a server certificate for names (and 127.0.0.1),
// ECDSA P-256, valid for a day, written as PEM files in dir (readable by
// Squid's own user); it returns their paths.
func WriteCA(dir string, names ...string) (caPath, certPath, keyPath string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "peerd test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), DNSNames: names,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", "", err
	}
	paths := make([]string, 3)
	for i, f := range []struct {
		name, typ string
		der       []byte
	}{{"ca.pem", "CERTIFICATE", caDER}, {"cert.pem", "CERTIFICATE", der}, {"key.pem", "EC PRIVATE KEY", keyDER}} {
		paths[i] = filepath.Join(dir, f.name)
		if err := os.WriteFile(paths[i], pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o644); err != nil {
			return "", "", "", err
		}
	}
	return paths[0], paths[1], paths[2], nil
}
