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

// renew renews the lease once, within timeout unless ctx ends first, and
// returns the TTL etcd granted, or rpctypes.ErrLeaseNotFound if the lease is
// gone. A failure ends the stream; the next renewal opens another. Opening
// one may take until open: with auth on it waits for a token, a bcrypt
// check on etcd, and cutting that short at timeout would only make the next
// renewal ask for another (under load, none would ever end in time).
func (r *renewer) renew(ctx context.Context, timeout, open time.Duration) (int64, error) {
	if !r.plain {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := r.cli.KeepAliveOnce(ctx, r.id)
		if err != nil {
			return 0, err
		}
		return resp.TTL, nil
	}
	deadline := time.Now().Add(timeout)
	reused := r.stream != nil
	resp, err := r.exchange(ctx, timeout, open)
	if err != nil && reused && ctx.Err() == nil && time.Until(deadline) > 0 {
		// A stream that broke while idle (its member restarted, the
		// connection was reset) fails the next request at once: the
		// renewal goes on a new stream, as KeepAliveOnce's would.
		r.close()
		resp, err = r.exchange(ctx, time.Until(deadline), open)
	}
	switch {
	case err != nil:
		r.close()
		return 0, err
	case resp.TTL <= 0:
		return 0, rpctypes.ErrLeaseNotFound
	}
	return resp.TTL, nil
}

// exchange sends one keepalive request on the stream, opened if need be
// (within open), and receives its answer; past timeout, it ends the stream
// (and so its own wait).
func (r *renewer) exchange(ctx context.Context, timeout, open time.Duration) (*pb.LeaseKeepAliveResponse, error) {
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
			return nil, err
		}
		r.stream = s
		if !t.Stop() {
			return nil, context.Cause(ctx) // ended as it opened
		}
		t.Reset(timeout)
	}
	if err := r.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(r.id)}); err != nil {
		return nil, err
	}
	resp, err := r.stream.Recv()
	if err == nil && !t.Stop() {
		r.close() // the answer came as the timer ended the stream: it stands
	}
	return resp, err
}

// close ends the stream, if one is open.
func (r *renewer) close() {
	if r.end != nil {
		r.end()
	}
	r.stream, r.end = nil, nil
}
