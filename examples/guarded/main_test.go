package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/examples/internal/progtest"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

func TestMain(m *testing.M) { progtest.Main(m, main) }

// hang bounds every wait for the program: far above what it needs, so it
// only catches a hang.
const hang = 30 * time.Second

func guarded(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(fencingtest.Context(t, hang), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func balances(t *testing.T, c *fencingtest.Cluster) string {
	t.Helper()
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
	c := fencingtest.Single(t)
	ep := c.Endpoints()[0]
	code, out, stderr := guarded(t, "--endpoints", ep, "--seed", "100", "--amount", "30")
	if code != 0 || !strings.Contains(out, "moved 30 from alice to bob") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if got := balances(t, c); got != "alice=70 bob=130" {
		t.Fatalf("balances = %s", got)
	}
	code, _, stderr = guarded(t, "--endpoints", ep, "--amount", "71")
	if code != 1 || !strings.Contains(stderr, ErrInsufficientFunds.Error()) {
		t.Fatalf("overdraft: exit %d, stderr:\n%s", code, stderr)
	}
	if got := balances(t, c); got != "alice=70 bob=130" {
		t.Fatalf("balances after the overdraft = %s; want unchanged", got)
	}
	if keys := etcdtest.Keys(t, c, "leasehold/"); len(keys) != 0 {
		t.Fatalf("lock keys left: %q", keys)
	}
}

// A holder that lost its lock writes nothing.
func TestTransferAfterLockLostWritesNothing(t *testing.T) {
	c := fencingtest.Single(t)
	b := &bank{cli: c.Client(t), timeout: hang, log: slog.New(slog.DiscardHandler)}
	if err := b.seed(t.Context(), 100, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	h := fencingtest.Lock(t, fencingtest.Session(t, c.Client(t)), "accounts")
	c.Delete(t, h.Key()) // an operator, or an expired lease
	err := b.transfer(t.Context(), h, "alice", "bob", 10)
	if !errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("transfer after loss: %v; want ErrNotOwner", err)
	}
	if got := balances(t, c); got != "alice=100 bob=100" {
		t.Fatalf("balances = %s; want unchanged", got)
	}
}

// A lock held elsewhere for longer than --timeout fails the step that waits
// for it, by name, instead of hanging.
func TestLockWaitIsBounded(t *testing.T) {
	c := fencingtest.Single(t)
	fencingtest.Lock(t, fencingtest.Session(t, c.Client(t)), "accounts")
	code, out, stderr := guarded(t, "--endpoints", c.Endpoints()[0], "--seed", "100", "--timeout", "1s")
	if code != 1 || !strings.Contains(stderr, "lock accounts: no answer within 1s") || strings.Contains(out, "moved") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
}

// As a user runs it: TLS with client certificates by flags or by etcdctl's
// variables; a wrong CA or nothing listening fails within the dial timeout,
// naming the endpoint.
func TestProgramWithTLS(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	ep := c.Endpoints()[0]
	tlsArgs := []string{"--endpoints", ep, "--cacert", c.TLS.CA, "--cert", c.TLS.Cert, "--key", c.TLS.Key}
	code, out, stderr := progtest.Run(t, hang, nil, append(tlsArgs, "--seed", "100", "--amount", "30")...)
	if code != 0 || !strings.Contains(out, "moved 30 from alice to bob") {
		t.Fatalf("with TLS flags: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	env := []string{"ETCDCTL_ENDPOINTS=" + ep, "ETCDCTL_CACERT=" + c.TLS.CA, "ETCDCTL_CERT=" + c.TLS.Cert, "ETCDCTL_KEY=" + c.TLS.Key}
	if code, _, stderr := progtest.Run(t, hang, env, "--amount", "5"); code != 0 {
		t.Fatalf("with ETCDCTL_* variables: exit %d\n%s", code, stderr)
	}
	if got := balances(t, c); got != "alice=65 bob=135" {
		t.Fatalf("balances = %s", got)
	}
	progtest.CheckConnectFailures(t, c, hang, nil)
}

func TestCommandLine(t *testing.T) {
	if code, _, stderr := progtest.Run(t, hang, nil, "--help"); code != 0 || !strings.Contains(stderr, "usage: guarded") {
		t.Fatalf("--help: exit %d\n%s", code, stderr)
	}
	for _, args := range [][]string{
		{"--amount", "0"},
		{"--from", "bob"},
		{"--cert", "c.pem"},
		{"--dial-timeout", "0s"},
		{"--nonsense"},
		{"extra"},
	} {
		if code := run(t.Context(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("guarded %q: exit %d; want 2", args, code)
		}
	}
}
