package fencingtest

import (
	"fmt"
	"github.com/leasehold/leasehold/internal/testbed/kit"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
)

// Link is one simulated process's own path to the cluster: a TCP proxy per
// member, and for a client made by ProxiedClient a hold on its lease
// renewals. A fault on a Link affects only the clients behind it.
type Link struct {
	proxies  []proxy.Server
	renewals stall
}

// ProxiedClient returns a client that reaches every member through its own
// TCP proxies, and the Link that controls them. t.Cleanup closes both.
func (c *Cluster) ProxiedClient(t TB, opts ...ClientOption) (*clientv3.Client, *Link) {
	t.Helper()
	l := c.NewLink(t)
	opts = append([]ClientOption{l.renewals.option()}, opts...)
	// Cleanups run last-in first-out: the client closes before its proxies,
	// whose Close waits for the connections to end.
	return NewClient(t, l.Endpoints(), opts...), l
}

// NewLink returns a TCP proxy per member, for a client made elsewhere (in a
// subprocess, say) to reach the cluster through Endpoints. t.Cleanup closes
// it, after the cleanups registered later (such as the client's).
func (c *Cluster) NewLink(t TB) *Link {
	t.Helper()
	var all []int
	for i := range c.Members {
		all = append(all, i)
	}
	return c.newLinkTo(t, all...)
}

// newLinkTo is NewLink to the given members only: a client behind it cannot
// fail over to the others.
func (c *Cluster) newLinkTo(t TB, members ...int) *Link {
	t.Helper()
	l := &Link{}
	for _, i := range members {
		l.proxies = append(l.proxies, newProxy(t, c.Members[i].ClientURL))
	}
	t.Cleanup(l.Close)
	return l
}

// Endpoints returns the client URLs of the link's proxies.
func (l *Link) Endpoints() []string {
	var eps []string
	for _, p := range l.proxies {
		eps = append(eps, "http://"+strings.TrimPrefix(p.From(), "tcp://"))
	}
	return eps
}

func newProxy(t TB, to url.URL) proxy.Server {
	t.Helper()
	var p proxy.Server
	var err error
	// A free port can be taken by another test binary before the proxy
	// binds it: try again on another.
	for range 5 {
		if p, err = listenProxy(to); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("fencingtest: proxy: %v", err)
	}
	// The proxy reports connection errors on a small buffered channel and
	// stalls its copy loops when nobody reads it: drain it until it closes.
	go func() {
		for {
			select {
			case <-p.Error():
			case <-p.Done():
				return
			}
		}
	}()
	return p
}

func listenProxy(to url.URL) (proxy.Server, error) {
	host, err := kit.FreeAddr()
	if err != nil {
		return nil, err
	}
	p := proxy.NewServer(proxy.ServerConfig{
		Logger: zap.NewNop(),
		From:   url.URL{Scheme: "tcp", Host: host},
		To:     url.URL{Scheme: "tcp", Host: to.Host},
	})
	select {
	case <-p.Ready():
		return p, nil
	case err := <-p.Error():
		return nil, fmt.Errorf("listen on %s: %w", host, err)
	}
}

// Blackhole partitions the process behind the link from the cluster. What
// the code under test should see: requests hang until their deadlines; its
// holds' and terms' contexts end with fencing.ErrLeaseUnconfirmed once the
// session's ValidUntil passes, before the server expires the lease; after
// Restore, its guarded writes for what it held are refused
// (guard.ErrNotOwner), and election.Run campaigns again.
//
// Every byte stops in both directions while the TCP connections stay open:
// the client sees silence, as in a real partition, not a reset. Restore
// delivers the held bytes late but intact, as TCP does after a partition
// heals. gRPC's keepalive notices a dead link only after 10 s or more; a
// test that needs the client to reconnect sooner restarts the member.
func (l *Link) Blackhole() {
	for _, p := range l.proxies {
		p.PauseTx()
		p.PauseRx()
	}
}

// blackholeRequests holds what the client sends and lets replies through:
// requests vanish, the connection looks alive. To the code under test, the
// same as Blackhole.
func (l *Link) blackholeRequests() {
	for _, p := range l.proxies {
		p.PauseTx()
	}
}

// StallRenewals holds every lease renewal the link's ProxiedClient sends
// (LeaseKeepAlive), and nothing else: the process runs and its other
// requests are answered, but its leases are not renewed, as when a garbage
// collection pause or an overloaded event loop delays the renewal goroutine
// past the lease's TTL. What the code under test should see: its holds' and
// terms' contexts end with fencing.ErrLeaseUnconfirmed once the session's
// ValidUntil passes, before the server expires the lease and another
// process takes over; a guarded write sent after the expiry is refused with
// guard.ErrNotOwner. Restore lets renewals through again (a lease already
// expired stays expired). A client made elsewhere on Endpoints is not held.
func (l *Link) StallRenewals() { l.renewals.hold() }

// Restore ends Blackhole, BlackholeRequests, Delay and StallRenewals.
func (l *Link) Restore() {
	l.renewals.release()
	for _, p := range l.proxies {
		p.UnpauseTx()
		p.UnpauseRx()
		p.UndelayTx()
		p.UndelayRx()
	}
}

// Delay adds d of latency to each direction, for a process far from etcd.
// What the code under test should see: slower requests; a session renews in
// time while a round trip stays well under a third of its TTL.
func (l *Link) Delay(d time.Duration) {
	for _, p := range l.proxies {
		p.DelayTx(d, 0)
		p.DelayRx(d, 0)
	}
}

// Close closes the link's proxies, once the process behind them is gone for
// good, and waits for their connections to end. t.Cleanup also calls it; a
// second call does nothing.
func (l *Link) Close() {
	for _, p := range l.proxies {
		p.Close()
	}
}
