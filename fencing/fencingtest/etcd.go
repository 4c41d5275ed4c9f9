package fencingtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/testbed/kit"

	"github.com/leasehold/leasehold/fencing"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Timing of the embedded members. A short heartbeat makes leader elections
// (and so member faults) resolve in a fraction of a second; etcd still grants
// leases of at least one second with these settings.
const (
	tickMs     = 25
	electionMs = 250
	readyWait  = 10 * time.Second
)

// fsyncEnv is the environment variable that, set to exactly "1", makes the
// members fsync their WAL and backend as etcd does by default. Otherwise they
// skip it: tests need no durability across a crash of the machine.
const fsyncEnv = "LEASEHOLD_ETCD_FSYNC"

// Cluster is a set of embedded etcd members in this process.
type Cluster struct {
	Members []*Member
	// Admin is an unproxied client: it plays the operator or the rest of the
	// world in fault tests (deletes keys, revokes leases, compacts).
	Admin *clientv3.Client
	// Root is where the helpers that take a name (Queue, WaitNewLeader,
	// RevokeOwner, DeleteOwner) look for it: fencing.DefaultRoot
	// unless the test sets it to the root its sessions use (fencing.WithRoot).
	Root string
	// TLS is nil, or the certificates of a cluster started by SingleTLS.
	TLS       *kit.Certs
	clientTLS *tls.Config // nil, or loaded from TLS's good client certificate
}

// Member is one embedded etcd server. Stop and Restart keep its data dir and
// its ports.
type Member struct {
	Name      string
	ClientURL url.URL
	PeerURL   url.URL
	dir       string
	cluster   string
	certs     *kit.Certs // nil: plain http
	auth      tokens

	mu   sync.Mutex
	etcd *embed.Etcd // nil while stopped
	held *ports      // a stopped member's ports, kept for Restart; nil otherwise
}

// Single starts a one-member cluster.
func Single(t TB) *Cluster { return New(t, 1) }

// Three starts a three-member cluster, for faults that need a quorum.
func Three(t TB) *Cluster { return New(t, 3) }

// New starts a cluster of n members on free loopback ports, with data in
// temporary directories, and waits until it has a leader. Everything is
// stopped by t.Cleanup.
func New(t TB, n int) *Cluster {
	t.Helper()
	return newCluster(t, n, nil, tokens{})
}

// newCluster is New with certs and auth (see start).
func newCluster(t TB, n int, certs *kit.Certs, auth tokens) *Cluster {
	t.Helper()
	c, err := startOnFreePorts(n, certs, auth)
	if err != nil {
		t.Fatalf("fencingtest: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// startOnFreePorts is start, again on fresh ports while they were taken:
// free ports are found by listening and closing, and another test binary
// can take one before etcd binds it.
func startOnFreePorts(n int, certs *kit.Certs, auth tokens) (*Cluster, error) {
	var err error
	for range 5 {
		var c *Cluster
		if c, err = start(n, certs, auth); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
	}
	return nil, err
}

// start starts n members, serving TLS with certs unless nil, and making
// auth tokens as auth says.
func start(n int, certs *kit.Certs, auth tokens) (*Cluster, error) {
	c := &Cluster{Root: fencing.DefaultRoot, TLS: certs}
	var initial string
	for i := range n {
		dir, err := os.MkdirTemp("", "fencingtest-")
		if err != nil {
			c.Close()
			return nil, err
		}
		m := &Member{Name: fmt.Sprintf("m%d", i), dir: dir, certs: certs, auth: auth}
		c.Members = append(c.Members, m)
		if m.ClientURL.Host, err = kit.FreeAddr(); err != nil {
			c.Close()
			return nil, err
		}
		if m.PeerURL.Host, err = kit.FreeAddr(); err != nil {
			c.Close()
			return nil, err
		}
		m.ClientURL.Scheme, m.PeerURL.Scheme = "http", "http"
		if certs != nil {
			m.ClientURL.Scheme = "https"
		}
		if i > 0 {
			initial += ","
		}
		initial += m.Name + "=" + m.PeerURL.String()
	}
	for _, m := range c.Members {
		m.cluster = initial
	}
	// Members of a new cluster wait for each other: start them together.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range c.Members {
		wg.Go(func() { errs[i] = m.start("new") })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	var err error
	if certs != nil {
		if c.clientTLS, err = certs.ClientTLS(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if c.Admin, err = dial(c.Endpoints(), c.tlsOption()...); err != nil {
		c.Close()
		return nil, err
	}
	end := time.Now().Add(10 * time.Second)
	for c.leader() < 0 {
		if time.Now().After(end) {
			c.Close()
			return nil, errors.New("start cluster: no raft leader after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c, nil
}

// Close stops every member and deletes their data. Clients made with a
// TB close in their own cleanups, which run first.
func (c *Cluster) Close() {
	if c.Admin != nil {
		c.Admin.Close()
	}
	for _, m := range c.Members {
		m.stop()
		os.RemoveAll(m.dir)
	}
}

func (m *Member) config(state string, stopping context.Context) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.ClientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.ClientURL}
	cfg.ListenPeerUrls = []url.URL{m.PeerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.PeerURL}
	cfg.InitialCluster = m.cluster
	cfg.InitialClusterToken = "fencingtest"
	cfg.ClusterState = state
	cfg.TickMs = tickMs
	cfg.ElectionMs = electionMs
	// Tests need no durability; with fsyncEnv each write waits for its fsync,
	// as by default (a benchmark's cycle then costs what it does on a real
	// cluster).
	cfg.UnsafeNoFsync = os.Getenv(fsyncEnv) != "1"
	// bcrypt's lowest cost (bcrypt.MinCost): at etcd's default of 10 an
	// Authenticate takes over a second under the race detector. A slow one
	// is a fault a test injects, on purpose.
	cfg.BcryptCost = 4
	if m.auth.kind != "" {
		cfg.AuthToken = m.auth.kind
	}
	if m.auth.ttl != 0 {
		cfg.AuthTokenTTL = m.auth.ttl
	}
	cfg.EnableGRPCGateway = false
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if m.certs != nil {
		cfg.ClientTLSInfo = m.certs.ServerInfo()
	}
	cfg.GRPCAdditionalServerOptions = []grpc.ServerOption{grpc.ChainStreamInterceptor(endStreams(stopping))}
	return cfg
}

// endStreams ends every gRPC stream once stopping is done. A real etcd
// process drops its streams when it stops; an embedded member that removed
// itself keeps them open during its graceful close (up to 5.5 s), with no
// event, which would time a client's watch on it, not the library.
func endStreams(stopping context.Context) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		defer context.AfterFunc(stopping, cancel)()
		return handler(srv, ctxStream{ss, ctx})
	}
}

// ctxStream is a server stream with a context of its own.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

func (m *Member) start(state string) error {
	m.mu.Lock()
	held := m.held
	m.held = nil
	m.mu.Unlock()
	held.release()
	stopping, stopped := context.WithCancel(context.Background())
	e, err := embed.StartEtcd(m.config(state, stopping))
	if err != nil {
		stopped()
		return err
	}
	go func() { <-e.Server.StoppingNotify(); stopped() }()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return err
	case <-time.After(readyWait):
		e.Close()
		return fmt.Errorf("member %s not ready after %v", m.Name, readyWait)
	}
	m.mu.Lock()
	m.etcd = e
	m.mu.Unlock()
	return nil
}

// running reports whether the member is serving.
func (m *Member) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd != nil
}

// isLeader reports whether the member is running and is the raft leader.
func (m *Member) isLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd != nil && m.etcd.Server.Leader() == m.etcd.Server.MemberID()
}

// stop stops the member for good: Close.
func (m *Member) stop() {
	m.mu.Lock()
	e, held := m.etcd, m.held
	m.etcd, m.held = nil, nil
	m.mu.Unlock()
	if e != nil {
		e.Close()
	}
	held.release()
}

// pause stops the member and keeps its ports bound until it starts again:
// a port left free is soon handed to a server of another test binary
// running alongside, and Restart would fail on it.
func (m *Member) pause() {
	m.stop()
	held := holdPorts(m.ClientURL.Host, m.PeerURL.Host)
	m.mu.Lock()
	m.held = held
	m.mu.Unlock()
}

// Endpoints returns the client URLs of all members, running or not.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL.String())
	}
	return eps
}

// ClientOption adjusts the configuration of a test client.
type ClientOption func(*clientv3.Config)

// Client returns a client connected straight to every member; t.Cleanup
// closes it.
func (c *Cluster) Client(t TB, opts ...ClientOption) *clientv3.Client {
	t.Helper()
	return NewClient(t, c.Endpoints(), append(c.tlsOption(), opts...)...)
}

// tlsOption connects a client with the cluster's good client certificate,
// if the cluster serves TLS.
func (c *Cluster) tlsOption() []ClientOption {
	if c.clientTLS == nil {
		return nil
	}
	return []ClientOption{withTLS(c.clientTLS.Clone())}
}

// NewClient returns a client for the given endpoints; t.Cleanup closes it.
func NewClient(t TB, endpoints []string, opts ...ClientOption) *clientv3.Client {
	t.Helper()
	cli, err := dial(endpoints, opts...)
	if err != nil {
		t.Fatalf("fencingtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func dial(endpoints []string, opts ...ClientOption) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// Detect a dead connection quickly, so a healed partition or a
		// restarted member is picked up within a second or two.
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	return clientv3.New(cfg)
}

// Stop stops member i; its data and ports are kept for Restart. The ports
// stay bound meanwhile, so that no other test binary takes them: a
// connection to them is closed at once, as by a host whose etcd is down. What the
// code under test should see while a quorum runs: nothing but a slower
// request or two, as its clients fail over to the other members; holds and
// terms last.
func (c *Cluster) Stop(i int) { c.Members[i].pause() }

// Restart starts a stopped member again from its data dir.
func (c *Cluster) Restart(t TB, i int) {
	t.Helper()
	if err := c.Members[i].start("existing"); err != nil {
		t.Fatalf("fencingtest: restart %s: %v", c.Members[i].Name, err)
	}
}

// leader returns the index of the member that currently leads, or -1.
func (c *Cluster) leader() int {
	for i, m := range c.Members {
		if m.isLeader() {
			return i
		}
	}
	return -1
}

// WaitLeader waits until a running member leads and returns its index.
func (c *Cluster) WaitLeader(t TB) int {
	t.Helper()
	var leader int
	WaitFor(t, 10*time.Second, "a raft leader", func() bool {
		leader = c.leader()
		return leader >= 0
	})
	return leader
}

// StopLeader stops the current raft leader and returns its index: a raft
// election follows, within about 250 ms here. What the code under test
// should see: nothing but a pause in requests; holds and terms last, since a
// session renews with the TTL's two thirds to spare.
func (c *Cluster) StopLeader(t TB) int {
	t.Helper()
	i := c.WaitLeader(t)
	c.Stop(i)
	return i
}

// WaitFor polls cond until it holds, failing t after the deadline. It is the
// only way tests here wait: on a condition, never on a sleep.
func WaitFor(t TB, deadline time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(deadline, cond) {
		t.Fatalf("fencingtest: gave up after %v waiting for %s", deadline, what)
	}
}

// Within polls cond until it holds, for at most deadline, and reports
// whether it held: WaitFor for a condition whose failure is worth a note
// rather than a failed test.
func Within(deadline time.Duration, cond func() bool) bool {
	for end := time.Now().Add(deadline); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

// Ended waits up to deadline for ctx to end and returns its cause, failing
// t if it has not ended by then.
func Ended(t TB, ctx context.Context, deadline time.Duration, what string) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(deadline):
		t.Fatalf("fencingtest: %s: the context had not ended after %v", what, deadline)
		return nil
	}
}

// Context returns a context bounded by d and by the test's end.
func Context(t TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
