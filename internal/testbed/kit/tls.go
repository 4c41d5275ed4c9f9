package kit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// Certs are the PEM files of a TLS cluster, generated for one test: a CA, a
// server certificate for 127.0.0.1 and localhost, a client certificate the
// cluster accepts, and a second CA that signed none of them.
type Certs struct {
	CA, Cert, Key string                     // what a client passes as --cacert, --cert, --key
	WrongCA       string                     // a CA that did not sign the server's certificate
	Untrusted     struct{ Cert, Key string } // a client certificate signed by WrongCA
	serverCert    string
	serverKey     string
}

// NewCerts writes a fresh CA, server and client certificates into dir.
func NewCerts(dir string) (*Certs, error) {
	c := &Certs{
		CA: filepath.Join(dir, "ca.pem"), WrongCA: filepath.Join(dir, "wrong-ca.pem"),
		Cert: filepath.Join(dir, "client.pem"), Key: filepath.Join(dir, "client-key.pem"),
		serverCert: filepath.Join(dir, "server.pem"), serverKey: filepath.Join(dir, "server-key.pem"),
	}
	c.Untrusted.Cert, c.Untrusted.Key = filepath.Join(dir, "untrusted.pem"), filepath.Join(dir, "untrusted-key.pem")
	ca, caKey, err := issue(nil, nil, c.CA, "", &x509.Certificate{
		Subject: pkix.Name{CommonName: "fencingtest CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	})
	if err != nil {
		return nil, err
	}
	wrong, wrongKey, err := issue(nil, nil, c.WrongCA, "", &x509.Certificate{
		Subject: pkix.Name{CommonName: "some other CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	})
	if err != nil {
		return nil, err
	}
	leaf := func(cn string, usage x509.ExtKeyUsage) *x509.Certificate {
		return &x509.Certificate{
			Subject: pkix.Name{CommonName: cn}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		}
	}
	if _, _, err := issue(ca, caKey, c.serverCert, c.serverKey, leaf("fencingtest server", x509.ExtKeyUsageServerAuth)); err != nil {
		return nil, err
	}
	if _, _, err := issue(ca, caKey, c.Cert, c.Key, leaf("fencingtest client", x509.ExtKeyUsageClientAuth)); err != nil {
		return nil, err
	}
	if _, _, err := issue(wrong, wrongKey, c.Untrusted.Cert, c.Untrusted.Key, leaf("stranger", x509.ExtKeyUsageClientAuth)); err != nil {
		return nil, err
	}
	return c, nil
}

// issue signs tmpl with parent (self-signed when parent is nil) and writes
// the certificate, and the key when keyFile is set.
func issue(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, certFile, keyFile string, tmpl *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return nil, nil, err
	}
	if keyFile != "" {
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		if err := writePEM(keyFile, "EC PRIVATE KEY", kder); err != nil {
			return nil, nil, err
		}
	}
	return cert, key, nil
}

func writePEM(file, typ string, der []byte) error {
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// ServerInfo returns the TLS configuration of the cluster's members.
func (c *Certs) ServerInfo() transport.TLSInfo {
	return transport.TLSInfo{CertFile: c.serverCert, KeyFile: c.serverKey, TrustedCAFile: c.CA, ClientCertAuth: true}
}

// ClientTLS returns the TLS configuration of a client with the good
// certificate.
func (c *Certs) ClientTLS() (*tls.Config, error) {
	return transport.TLSInfo{CertFile: c.Cert, KeyFile: c.Key, TrustedCAFile: c.CA}.ClientConfig()
}
