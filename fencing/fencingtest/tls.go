package fencingtest

import (
	"crypto/tls"
	"os"

	"github.com/leasehold/leasehold/internal/testbed/kit"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// SingleTLS starts a one-member cluster that serves https only and requires
// a client certificate signed by its CA. Admin and Client connect with the
// good certificate.
func SingleTLS(t TB) *Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "fencingtest-certs-")
	if err != nil {
		t.Fatalf("fencingtest: certificates: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	certs, err := kit.NewCerts(dir)
	if err != nil {
		t.Fatalf("fencingtest: certificates: %v", err)
	}
	return newCluster(t, 1, certs, tokens{})
}

// withTLS makes a client use cfg.
func withTLS(cfg *tls.Config) ClientOption {
	return func(c *clientv3.Config) { c.TLS = cfg }
}
