// Package watchstream chooses the gRPC stream a clientv3 Watch goes on, so
// that a stream whose auth token etcd no longer accepts gets no new watch.
//
// clientv3 puts every watch of a client whose context carries the same
// outgoing metadata on one stream, and the stream carries the auth token it
// was opened with. etcd checks that token at each watch's create, and
// refuses the create once the token has expired (a JWT at its time, a
// simple token after its TTL unused), is older than the auth store, or is
// missing (the stream was opened while auth was off). clientv3 closes the
// refused watch but keeps the stream for the others, and sends every later
// create on it: each is refused again, for as long as one watch lives
// there. Watches made with Context go, after a refusal reported to Ended, on
// a new stream, which clientv3 opens with a new token.
package watchstream

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// key is the metadata that tells the streams apart: clientv3 keys its
// streams by the outgoing metadata.
const key = "leasehold-watch-stream"

// gens holds each client's stream generation, until the client closes.
var gens sync.Map // *clientv3.Client → *atomic.Int64

func gen(cli *clientv3.Client) *atomic.Int64 {
	if g, ok := gens.Load(cli); ok {
		return g.(*atomic.Int64)
	}
	g, loaded := gens.LoadOrStore(cli, new(atomic.Int64))
	if !loaded {
		context.AfterFunc(cli.Ctx(), func() { gens.Delete(cli) })
	}
	return g.(*atomic.Int64)
}

// Context returns ctx for a Watch on cli, on the stream of cli's watches
// since the last refusal reported to Ended.
func Context(ctx context.Context, cli *clientv3.Client) context.Context {
	return metadata.AppendToOutgoingContext(ctx, key, strconv.FormatInt(gen(cli).Load(), 10))
}

// Ended takes note of resp, the last response of a watch on cli made with
// ctx, as Context returned it (or made from it): if etcd refused the watch
// for its stream's token, later watches go on a new stream. Many watches
// refused on one stream move them once.
func Ended(ctx context.Context, cli *clientv3.Client, resp clientv3.WatchResponse) {
	if err := resp.Err(); err == nil || !TokenRefusal(err.Error()) {
		return
	}
	if on, ok := stream(ctx); ok {
		gen(cli).CompareAndSwap(on, on+1)
	}
}

// stream returns the generation of the stream Context put ctx on.
func stream(ctx context.Context) (int64, bool) {
	md, _ := metadata.FromOutgoingContext(ctx)
	vs := md.Get(key)
	if len(vs) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(vs[len(vs)-1], 10, 64)
	return n, err == nil
}

// TokenRefusal reports whether reason, why etcd cancelled or refused a
// watch, is the auth token of the watch's stream: expired, older than the
// auth store, or none. A stream opened again gets a new token.
func TokenRefusal(reason string) bool {
	for _, err := range []error{rpctypes.ErrGRPCInvalidAuthToken, rpctypes.ErrGRPCAuthOldRevision, rpctypes.ErrGRPCUserEmpty} {
		if strings.Contains(reason, rpctypes.ErrorDesc(err)) {
			return true
		}
	}
	return false
}
