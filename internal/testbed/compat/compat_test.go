package compat_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbed/kit"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// binEnv names the etcd server binary the tests run against.
const binEnv = "LEASEHOLD_ETCD_BIN"

const (
	wait      = 30 * time.Second // bounds every blocking call and every wait on a condition
	startWait = 30 * time.Second // for the server to serve its first request
)

// TestCompat runs the compatibility set against the server binary named by
// LEASEHOLD_ETCD_BIN, once over plain http and once over TLS with client
// certificates, each on a server of its own. The set uses the public API
// only; auth runs last, since it cannot be turned off again.
func TestCompat(t *testing.T) {
	bin := os.Getenv(binEnv)
	if bin == "" {
		t.Skipf("%s not set: set it to an etcd server binary to run the version-skew tests "+
			"(scripts/build-etcd.sh VERSION builds one; apt-get install etcd-server gives 3.4 at /usr/bin/etcd)", binEnv)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s=%s: --version: %v\n%s", binEnv, bin, err, out)
	}
	t.Logf("%s=%s\n%s", binEnv, bin, strings.TrimSpace(string(out)))

	for _, secure := range []bool{false, true} {
		mode := map[bool]string{false: "plain", true: "tls"}[secure]
		t.Run(mode, func(t *testing.T) {
			srv := startServer(t, bin, secure)
			cases := []struct {
				name string
				f    func(*testing.T, *server)
			}{
				{"lock", testLock},
				{"trylock", testTryLock},
				{"handoff", testHandoff},
				{"guarded_txn", testGuardedTxn},
				{"watch_key_deletion", testWatchKeyDeletion},
				{"election", testElection},
				{"run", testRun},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.f(t, srv) })
			}
			t.Run("nothing_left", func(t *testing.T) {
				// Every session above is closed: none may have left a key.
				if keys := keysUnder(t, srv.client(t), fencing.DefaultRoot); len(keys) != 0 {
					t.Fatalf("keys left under %s: %q", fencing.DefaultRoot, keys)
				}
			})
			t.Run("auth", func(t *testing.T) { testAuth(t, srv) })
		})
	}
}

// --- the compatibility set ---

// lock: Lock gives a positive token, Unlock removes the key.
func testLock(t *testing.T, srv *server) {
	cli := srv.client(t)
	ctx := fencingtest.Context(t, wait)
	h, err := mutex(t, session(t, cli), "compat/lock").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if tok := h.Token(); tok.Revision <= 0 || tok.Name != "compat/lock" {
		t.Fatalf("token %v: want name compat/lock and a positive revision", tok)
	}
	if keys := keysUnder(t, cli, subtree(t, "compat/")); !slices.Equal(keys, []string{h.Key()}) {
		t.Fatalf("keys while held: %q; want only the hold's key %q", keys, h.Key())
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if keys := keysUnder(t, cli, subtree(t, "compat/")); len(keys) != 0 {
		t.Fatalf("keys left after Unlock: %q", keys)
	}
}

// trylock: a held lock makes a second session's TryLock fail with ErrLocked,
// writing nothing (the store's revision does not move).
func testTryLock(t *testing.T, srv *server) {
	cli := srv.client(t)
	ctx := fencingtest.Context(t, wait)
	const name = "compat/trylock"
	h, err := mutex(t, session(t, cli), name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	other := mutex(t, session(t, cli), name)
	before := revision(t, cli)
	if h2, err := other.TryLock(ctx); !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("TryLock of a held lock: hold %v, err %v; want ErrLocked", h2, err)
	}
	if after := revision(t, cli); after != before {
		t.Fatalf("TryLock of a held lock wrote: revision %d → %d", before, after)
	}
	if keys := keysUnder(t, cli, queue(t, fencing.KindLock, name)); !slices.Equal(keys, []string{h.Key()}) {
		t.Fatalf("keys after a refused TryLock: %q; want only the holder's %q", keys, h.Key())
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	h2, err := other.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock of a free lock: %v", err)
	}
	if err := h2.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// handoff: B's Lock waits behind A and gets the lock, with a greater token,
// when A unlocks.
func testHandoff(t *testing.T, srv *server) {
	cli := srv.client(t)
	ctx := fencingtest.Context(t, wait)
	const name = "compat/handoff"
	a, err := mutex(t, session(t, cli), name).Lock(ctx)
	if err != nil {
		t.Fatalf("A Lock: %v", err)
	}
	type result struct {
		h   *fencing.Hold
		err error
	}
	got := make(chan result, 1)
	mb := mutex(t, session(t, cli), name)
	go func() {
		h, err := mb.Lock(ctx)
		got <- result{h, err}
	}()
	prefix := queue(t, fencing.KindLock, name)
	fencingtest.WaitFor(t, wait, "B's key queued behind A's", func() bool {
		return len(keysUnder(t, cli, prefix)) == 2
	})
	select {
	case r := <-got:
		t.Fatalf("B's Lock returned while A holds: hold %v, err %v", r.h, r.err)
	default:
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("A Unlock: %v", err)
	}
	var r result
	select {
	case r = <-got:
	case <-ctx.Done():
		t.Fatalf("B's Lock did not return after A's Unlock: %v", ctx.Err())
	}
	if r.err != nil {
		t.Fatalf("B Lock: %v", r.err)
	}
	if r.h.Token().Compare(a.Token()) <= 0 {
		t.Fatalf("B's token %v is not greater than A's %v", r.h.Token(), a.Token())
	}
	if err := r.h.Unlock(ctx); err != nil {
		t.Fatalf("B Unlock: %v", err)
	}
}

// guarded txn: the caller's compares choose Then or Else while the hold owns;
// after Unlock a guarded write is refused with ErrNotOwner and applies
// nothing.
func testGuardedTxn(t *testing.T, srv *server) {
	cli := srv.client(t)
	ctx := fencingtest.Context(t, wait)
	data := dataKey(t, cli, "txn")
	h, err := mutex(t, session(t, cli), "compat/txn").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	txn := func() *clientv3.TxnResponse {
		t.Helper()
		resp, err := guard.Txn(ctx, h).
			If(clientv3.Compare(clientv3.Version(data), "=", 0)).
			Then(clientv3.OpPut(data, "1")).
			Else(clientv3.OpGet(data)).
			Commit()
		if err != nil {
			t.Fatalf("guarded txn while held: %v", err)
		}
		return resp
	}
	if resp := txn(); !resp.Succeeded || len(resp.Responses) != 1 || resp.Responses[0].GetResponsePut() == nil {
		t.Fatalf("guarded txn on a missing key: %+v; want Then (one put)", resp)
	}
	resp := txn()
	if resp.Succeeded || len(resp.Responses) != 1 || resp.Responses[0].GetResponseRange() == nil {
		t.Fatalf("guarded txn on an existing key: %+v; want Else (one get)", resp)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "1" {
		t.Fatalf("Else's get: %v; want %s=1", kvs, data)
	}
	if _, err := guard.Put(ctx, h, data, "2"); err != nil {
		t.Fatalf("guard.Put while held: %v", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if _, err := guard.Put(ctx, h, data, "3"); !errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("guard.Put after Unlock: %v; want ErrNotOwner", err)
	}
	if v := value(t, cli, data); v != "2" {
		t.Fatalf("%s = %q after a refused write; want 2", data, v)
	}
}

// watch on key deletion: a second client deletes the hold's key; the hold's
// context and a guard.Watch of it end with ErrKeyDeleted, and guarded writes
// are refused.
func testWatchKeyDeletion(t *testing.T, srv *server) {
	cli := srv.client(t)
	ctx := fencingtest.Context(t, wait)
	data := dataKey(t, cli, "watch")
	h, err := mutex(t, session(t, cli), "compat/watch").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	hctx := h.Context()
	wctx, stop := guard.Watch(ctx, h) // returns once its watch is established
	defer stop()
	if err := wctx.Err(); err != nil {
		t.Fatalf("guard.Watch of a held lock ended at once: %v", context.Cause(wctx))
	}

	operator := srv.client(t)
	resp, err := operator.Delete(ctx, h.Key())
	if err != nil || resp.Deleted != 1 {
		t.Fatalf("delete %s from a second client: deleted %v, err %v", h.Key(), resp, err)
	}
	for what, c := range map[string]context.Context{"Hold.Context": hctx, "guard.Watch": wctx} {
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatalf("%s did not end after its key was deleted", what)
		}
		if cause := context.Cause(c); !errors.Is(cause, fencing.ErrKeyDeleted) {
			t.Errorf("%s ended with cause %v; want ErrKeyDeleted", what, cause)
		}
	}
	if _, err := guard.Put(ctx, h, data, "x"); !errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("guard.Put after the key was deleted: %v; want ErrNotOwner", err)
	}
	if err := h.Unlock(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Unlock of a lost hold: %v; want ErrNotHeld", err)
	}
}

// election: Observe, Campaign, Proclaim, TryCampaign against a leader,
// Resign, Leader with nobody leading.
func testElection(t *testing.T, srv *server) {
	cli := srv.client(t)
	ctx := fencingtest.Context(t, wait)
	const name = "compat/election"
	e := newElection(t, session(t, cli), name)

	octx, cancel := context.WithCancel(ctx)
	obs := e.Observe(octx)
	defer func() {
		cancel()
		for range obs { // the channel closes promptly once octx is done
		}
	}()
	if o := etcdtest.Next(t, obs); o.Err != nil || o.Leader != nil {
		t.Fatalf("first observation: %+v; want nobody leading", o)
	}

	term, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if term.Token().Revision <= 0 || term.Value() != "v1" {
		t.Fatalf("term: token %v, value %q", term.Token(), term.Value())
	}
	observe(t, ctx, obs, "the leader v1", func(l *election.Leader) bool {
		return l != nil && l.Token == term.Token() && l.Value == "v1" && l.Key == term.Key()
	})

	if err := term.Proclaim(ctx, "v2"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	observe(t, ctx, obs, "the proclaimed value v2", func(l *election.Leader) bool {
		return l != nil && l.Token == term.Token() && l.Value == "v2"
	})
	if l, err := e.Leader(ctx); err != nil || l.Value != "v2" || l.Token != term.Token() {
		t.Fatalf("Leader: %+v, %v; want v2 with token %v", l, err, term.Token())
	}

	other := newElection(t, session(t, cli), name)
	before := revision(t, cli)
	if t2, err := other.TryCampaign(ctx, "other"); !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("TryCampaign with a leader: term %v, err %v; want ErrLocked", t2, err)
	}
	if after := revision(t, cli); after != before {
		t.Fatalf("a refused TryCampaign wrote: revision %d → %d", before, after)
	}

	if err := term.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	observe(t, ctx, obs, "nobody leading after Resign", func(l *election.Leader) bool { return l == nil })
	if l, err := e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader after Resign: %+v, %v; want ErrNoLeader", l, err)
	}
	if keys := keysUnder(t, cli, subtree(t, "compat/")); len(keys) != 0 {
		t.Fatalf("keys left after Resign: %q", keys)
	}
}

// Run: the work runs once under a valid term, returns nil, and Run (policy
// Return by default) returns nil and leaves no key.
func testRun(t *testing.T, srv *server) {
	cli := srv.client(t)
	ctx := fencingtest.Context(t, wait)
	const name = "compat/run"
	data := dataKey(t, cli, "run")
	runs := 0 // Run returns only after work has: no race
	var token fencing.Token
	work := func(wctx context.Context, term *election.Term) error {
		runs++
		token = term.Token()
		if err := wctx.Err(); err != nil {
			return fmt.Errorf("work started with its context done: %w", context.Cause(wctx))
		}
		_, err := guard.Put(wctx, term, data, term.Token().String())
		return err
	}
	if err := election.Run(ctx, cli, name, "worker", work); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if runs != 1 || token.Revision <= 0 {
		t.Fatalf("work ran %d times, token %v; want once with a positive token", runs, token)
	}
	if keys := keysUnder(t, cli, subtree(t, "compat/")); len(keys) != 0 {
		t.Fatalf("keys left after Run: %q", keys)
	}
}

// auth: with etcd auth on, a user granted the range of "teamA/" locks a name
// under it, and is refused one outside it with etcd's permission error,
// leaving no key.
func testAuth(t *testing.T, srv *server) {
	ctx := fencingtest.Context(t, wait)
	admin := srv.client(t)
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "root"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enable auth: %v", err)
		}
	}
	root := srv.clientAs(t, "root", "root")
	grant := subtree(t, "teamA/")
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "teamA"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "teamA", grant, clientv3.GetPrefixRangeEnd(grant),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "teamA", "teamA"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "teamA", "teamA"); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("add user teamA granted %q: %v", grant, err)
		}
	}

	cli := srv.clientAs(t, "teamA", "teamA")
	s := session(t, cli)
	h, err := mutex(t, s, "teamA/x").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock(teamA/x) inside the grant: %v", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock(teamA/x): %v", err)
	}
	if _, err := mutex(t, s, "teamB/x").Lock(ctx); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("Lock(teamB/x) outside the grant: %v; want ErrPermissionDenied", err)
	}
	if _, err := newElection(t, s, "teamB/x").Campaign(ctx, "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("Campaign(teamB/x) outside the grant: %v; want ErrPermissionDenied", err)
	}
	if keys := keysUnder(t, root, fencing.DefaultRoot); len(keys) != 0 {
		t.Fatalf("keys left under %s: %q", fencing.DefaultRoot, keys)
	}
}

// --- the server ---

// server is one etcd process, single member, on free ports of 127.0.0.1.
type server struct {
	endpoint string
	tls      *tls.Config // nil: plain http
}

// startServer starts bin in a temporary data dir and waits until it serves;
// t.Cleanup kills it and waits for it to exit. With secure, it serves https
// only and requires a client certificate signed by its CA.
func startServer(t *testing.T, bin string, secure bool) *server {
	t.Helper()
	var certs *kit.Certs
	if secure {
		dir := t.TempDir()
		var err error
		if certs, err = kit.NewCerts(dir); err != nil {
			t.Fatalf("certificates: %v", err)
		}
		// NewCerts keeps the server's pair unexported; it writes it next to
		// the client's as server.pem and server-key.pem.
		for _, f := range []string{"server.pem", "server-key.pem"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Fatalf("kit.NewCerts no longer writes %s: %v", f, err)
			}
		}
	}
	var lastErr error
	for range 5 { // a free port can be taken between finding and binding it
		srv, err := tryStart(t, bin, certs)
		if err == nil {
			return srv
		}
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("start %s: %v", bin, lastErr)
	return nil
}

func tryStart(t *testing.T, bin string, certs *kit.Certs) (*server, error) {
	t.Helper()
	clientAddr, err := kit.FreeAddr()
	if err != nil {
		return nil, err
	}
	peerAddr, err := kit.FreeAddr()
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if certs != nil {
		scheme = "https"
	}
	clientURL, peerURL := scheme+"://"+clientAddr, "http://"+peerAddr
	args := []string{
		"--name", "compat",
		"--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "compat=" + peerURL,
		"--initial-cluster-state", "new",
		"--logger", "zap",
		"--log-level", "error",
	}
	srv := &server{endpoint: clientURL}
	if certs != nil {
		dir := filepath.Dir(certs.CA)
		args = append(args,
			"--cert-file", filepath.Join(dir, "server.pem"),
			"--key-file", filepath.Join(dir, "server-key.pem"),
			"--trusted-ca-file", certs.CA,
			"--client-cert-auth")
		if srv.tls, err = certs.ClientTLS(); err != nil {
			return nil, fmt.Errorf("client TLS: %w", err)
		}
	}

	var output etcdtest.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &output, &output
	kit.SetDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}

	cli, err := srv.dial("", "")
	if err != nil {
		stop()
		return nil, fmt.Errorf("client: %w", err)
	}
	defer cli.Close()
	deadline := time.Now().Add(startWait)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		st, err := cli.Status(ctx, clientURL)
		cancel()
		if err == nil {
			t.Logf("etcd %s serving at %s (server reports version %s)", filepath.Base(bin), clientURL, st.Version)
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("etcd output:\n%s", output.String())
				}
			})
			return srv, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("etcd exited before serving (%v):\n%s", cmd.ProcessState, output.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("not serving at %s after %v: %v\n%s", clientURL, startWait, err, output.String())
		}
		select { // poll again shortly, or at once if the process dies
		case <-exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dial connects to the server, logging in as user when user is set.
func (s *server) dial(user, password string) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:            []string{s.endpoint},
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Username:             user,
		Password:             password,
		Logger:               zap.NewNop(),
	}
	if s.tls != nil {
		cfg.TLS = s.tls.Clone()
	}
	return clientv3.New(cfg)
}

// client returns a new client of the server; t.Cleanup closes it.
func (s *server) client(t *testing.T) *clientv3.Client { return s.clientAs(t, "", "") }

// clientAs returns a new client of the server that logs in as user (no
// login when user is empty); t.Cleanup closes it.
func (s *server) clientAs(t *testing.T, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := s.dial(user, password)
	if err != nil {
		t.Fatalf("client of %s: %v", s.endpoint, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// --- helpers ---

var (
	session     = fencingtest.Session
	mutex       = etcdtest.Mutex
	newElection = etcdtest.Election
)

// subtree is the key range of every name under namePrefix.
func subtree(t *testing.T, namePrefix string) string {
	t.Helper()
	p, err := inspect.SubtreePrefix(fencing.DefaultRoot, namePrefix)
	if err != nil {
		t.Fatalf("SubtreePrefix(%q): %v", namePrefix, err)
	}
	return p
}

// queue is the key range of one lock's or election's queue.
func queue(t *testing.T, kind fencing.Kind, name string) string {
	t.Helper()
	p, err := inspect.KeyPrefix(fencing.DefaultRoot, kind, name)
	if err != nil {
		t.Fatalf("KeyPrefix(%s, %q): %v", kind, name, err)
	}
	return p
}

// keysUnder lists the keys under prefix.
func keysUnder(t *testing.T, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := cli.Get(fencingtest.Context(t, wait), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// revision is the store's current revision.
func revision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(fencingtest.Context(t, wait), "compat-data/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("read revision: %v", err)
	}
	return resp.Header.Revision
}

// value reads key ("" when missing).
func value(t *testing.T, cli *clientv3.Client, key string) string {
	t.Helper()
	resp, err := cli.Get(fencingtest.Context(t, wait), key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// dataKey is a key for a test's own data, outside the library's root;
// t.Cleanup deletes it.
func dataKey(t *testing.T, cli *clientv3.Client, name string) string {
	t.Helper()
	key := "compat-data/" + name
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cli.Delete(ctx, key)
	})
	return key
}

// observe receives observations until one satisfies want. An error
// observation fails t: on a healthy server nothing should keep Observe from
// reading.
func observe(t *testing.T, ctx context.Context, obs <-chan election.Observation, what string, want func(*election.Leader) bool) {
	t.Helper()
	for {
		o := etcdtest.Next(t, obs)
		if o.Err != nil {
			t.Fatalf("waiting for %s, Observe sent an error: %v", what, o.Err)
		}
		if want(o.Leader) {
			return
		}
		t.Logf("waiting for %s, observed %+v", what, o.Leader)
	}
}
