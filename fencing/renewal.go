package fencing

import (
	"context"
	"reflect"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// A renewer renews a session's lease on one keepalive stream, kept open
// from one renewal to the next. clientv3 fetches a new auth token for every
// stream it opens, and etcd answers that Authenticate with a bcrypt check
// of the password and a raft write: KeepAliveOnce opens a stream per call,
// which with auth on would cost etcd that at every renewal of every
// session. A client whose Lease is wrapped, or that has no connection of its
// own, renews through KeepAliveOnce.
type renewer struct {
	cli    *clientv3.Client
	id     clientv3.LeaseID
	plain  bool
	stream pb.Lease_LeaseKeepAliveClient // nil until opened, and after a failure
	end    context.CancelFunc            // ends stream
}

var plainLease = reflect.TypeOf(clientv3.NewLeaseFromLeaseClient(nil, nil, 0))

func newRenewer(cli *clientv3.Client, id clientv3.LeaseID) *renewer {
	return &renewer{cli: cli, id: id, plain: reflect.TypeOf(cli.Lease) == plainLease && cli.ActiveConnection() != nil}
}

// renew renews the lease once and returns the TTL etcd granted, with the
// time the acknowledged request was sent, or rpctypes.ErrLeaseNotFound if
// the lease is gone. A request gets timeout for its answer; opening a stream
// first may take until open: with auth on it waits for a token, a bcrypt
// check on etcd, and cutting that short at timeout would only make the next
// renewal ask for another (under load, none would ever end in time). A
// failure ends the stream; the next renewal opens another. A client whose
// Lease is wrapped renews through KeepAliveOnce, a stream (and, with auth
// on, a token) per call, within timeout.
func (r *renewer) renew(ctx context.Context, timeout, open time.Duration) (int64, time.Time, error) {
	if !r.plain {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		sent := time.Now()
		resp, err := r.cli.KeepAliveOnce(ctx, r.id)
		if err != nil {
			return 0, sent, err
		}
		return resp.TTL, sent, nil
	}
	deadline := time.Now().Add(timeout)
	reused := r.stream != nil
	resp, sent, err := r.exchange(ctx, timeout, open)
	if err != nil && reused && ctx.Err() == nil && time.Until(deadline) > 0 {
		// A stream that broke while idle (its member restarted, the
		// connection was reset) fails the next request at once: the
		// renewal goes on a new stream, as KeepAliveOnce's would.
		r.close()
		resp, sent, err = r.exchange(ctx, time.Until(deadline), open)
	}
	switch {
	case err != nil:
		r.close()
		return 0, sent, err
	case resp.TTL <= 0:
		return 0, sent, rpctypes.ErrLeaseNotFound
	}
	return resp.TTL, sent, nil
}

// exchange sends one keepalive request on the stream, opened if need be
// (within open), and receives its answer; past timeout, it ends the stream
// (and so its own wait). It returns the time the request was sent: after
// the stream's opening, which with auth on can take long.
func (r *renewer) exchange(ctx context.Context, timeout, open time.Duration) (_ *pb.LeaseKeepAliveResponse, sent time.Time, _ error) {
	opening := r.stream == nil
	budget := timeout
	if opening {
		ctx, r.end = context.WithCancel(ctx)
		budget = max(timeout, open)
	}
	t := time.AfterFunc(budget, r.end)
	defer t.Stop()
	if opening {
		// Wait for a connection, as clientv3's own lease calls do, rather
		// than fail at once while it reconnects, and for the token.
		s, err := pb.NewLeaseClient(r.cli.ActiveConnection()).LeaseKeepAlive(ctx, grpc.WaitForReady(true))
		if err != nil {
			return nil, time.Now(), err
		}
		r.stream = s
		if !t.Stop() {
			return nil, time.Now(), context.Cause(ctx) // ended as it opened
		}
		t.Reset(timeout)
	}
	sent = time.Now()
	if err := r.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(r.id)}); err != nil {
		return nil, sent, err
	}
	resp, err := r.stream.Recv()
	if err == nil && !t.Stop() {
		r.close() // the answer came as the timer ended the stream: it stands
	}
	return resp, sent, err
}

// close ends the stream, if one is open.
func (r *renewer) close() {
	if r.end != nil {
		r.end()
	}
	r.stream, r.end = nil, nil
}
