package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/etcdtest"
	"github.com/leasehold/leasehold/internal/fencingtest"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

func seed(t *testing.T, c *etcdtest.Cluster, balances map[string]string) {
	for a, v := range balances {
		if _, err := c.Admin.Put(t.Context(), accounts+a, v); err != nil {
			t.Fatal(err)
		}
	}
}

func balances(t *testing.T, c *etcdtest.Cluster) string {
	var parts []string
	for _, a := range []string{"alice", "bob"} {
		resp, err := c.Admin.Get(t.Context(), accounts+a)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("read %s: %v", a, err)
		}
		parts = append(parts, a+"="+string(resp.Kvs[0].Value))
	}
	return strings.Join(parts, " ")
}

func TestTransfer(t *testing.T) {
	c := etcdtest.Single(t)
	seed(t, c, map[string]string{"alice": "100", "bob": "100"})
	var out bytes.Buffer
	if err := run(t.Context(), c.Client(t), "alice", "bob", 30, &out); err != nil {
		t.Fatal(err)
	}
	if got := balances(t, c); got != "alice=70 bob=130" {
		t.Fatalf("balances = %s", got)
	}
	if err := run(t.Context(), c.Client(t), "alice", "bob", 71, &out); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("overdraft: %v", err)
	}
	if !strings.Contains(out.String(), "moved 30 from alice to bob") {
		t.Fatalf("output: %s", out.String())
	}
}

// A holder that lost its lock writes nothing.
func TestTransferAfterLockLostWritesNothing(t *testing.T) {
	c := etcdtest.Single(t)
	seed(t, c, map[string]string{"alice": "100", "bob": "100"})
	h := fencingtest.Lock(t, fencingtest.Session(t, c.Client(t)), "accounts")
	c.Delete(t, h.Key()) // an operator, or an expired lease
	err := transfer(t.Context(), c.Client(t), h, "alice", "bob", 10)
	if !errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("transfer after loss: %v; want ErrNotOwner", err)
	}
	if got := balances(t, c); got != "alice=100 bob=100" {
		t.Fatalf("balances = %s; want unchanged", got)
	}
}
