package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

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
