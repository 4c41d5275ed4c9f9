package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/examples/internal/connect"
	"github.com/leasehold/leasehold/internal/etcdtest"
)

func TestMain(m *testing.M) {
	// The demo re-executes itself for its workers: here, the test binary.
	if name := os.Getenv(workerEnv); name != "" {
		os.Exit(workerMain(name, os.Args[1:]))
	}
	etcdtest.Main(m)
}

// The whole story runs on an embedded etcd and its verdict holds.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	ok, err := runDemo(etcdtest.Context(t, 2*time.Minute), config{ttl: 2 * time.Second, workers: 3}, &out)
	t.Log("\n" + out.String())
	if err != nil || !ok {
		t.Fatalf("demo: ok=%v err=%v", ok, err)
	}
	for _, want := range []string{"lost updates: 0", "REJECTED by etcd", "409 stale token", ": OK"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// Against a given cluster (TLS with client certificates) the demo writes
// only under its own prefix and leaves no key behind.
func TestDemoOnTLSClusterLeavesNoKeys(t *testing.T) {
	c := etcdtest.SingleTLS(t)
	cfg := config{ttl: 2 * time.Second, workers: 2}
	cfg.conn = connect.Config{Endpoints: c.Endpoints()[0], CACert: c.TLS.CA, Cert: c.TLS.Cert, Key: c.TLS.Key, DialTimeout: 5 * time.Second}
	var out bytes.Buffer
	ok, err := runDemo(etcdtest.Context(t, 2*time.Minute), cfg, &out)
	t.Log("\n" + out.String())
	if err != nil || !ok {
		t.Fatalf("demo: ok=%v err=%v", ok, err)
	}
	if keys := c.Keys(t, ""); len(keys) != 0 {
		t.Fatalf("keys left in the cluster: %q", keys)
	}
}

// An unreachable cluster fails the demo within the dial timeout, naming it.
func TestDemoUnreachable(t *testing.T) {
	cfg := config{ttl: 2 * time.Second, workers: 2}
	cfg.conn = connect.Config{Endpoints: "127.0.0.1:1", DialTimeout: 2 * time.Second}
	_, err := runDemo(etcdtest.Context(t, time.Minute), cfg, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("runDemo on nothing: %v", err)
	}
}
