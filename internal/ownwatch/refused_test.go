package ownwatch_test

import (
	"context"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// sentWatches records the requests a client writes on its watch streams.
type sentWatches struct {
	mu   sync.Mutex
	reqs []*pb.WatchRequest
}

func (s *sentWatches) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc,
		cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		return &recordingStream{ClientStream: cs, s: s}, err
	}))
}

// creates returns the IDs of the creates sent, and for each create after
// the first whether a cancel of the ID before it came between them.
func (s *sentWatches) creates() (ids []int64, cancelledFirst []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cancelled := map[int64]bool{}
	for _, r := range s.reqs {
		if c := r.GetCancelRequest(); c != nil {
			cancelled[c.WatchId] = true
		}
		if c := r.GetCreateRequest(); c != nil {
			if len(ids) > 0 {
				cancelledFirst = append(cancelledFirst, cancelled[ids[len(ids)-1]])
			}
			ids = append(ids, c.WatchId)
		}
	}
	return ids, cancelledFirst
}

type recordingStream struct {
	grpc.ClientStream
	s *sentWatches
}

func (r *recordingStream) SendMsg(m any) error {
	if req, ok := m.(*pb.WatchRequest); ok {
		r.s.mu.Lock()
		r.s.reqs = append(r.s.reqs, req)
		r.s.mu.Unlock()
	}
	return r.ClientStream.SendMsg(m)
}

// A watch etcd refuses for a reason other than the stream's token (here a
// role that may write the key but not read it) is created again, each time
// under a new ID after a cancel of the old: etcd keeps a watch it cancelled
// for compaction under its ID, and refuses a create that reuses it ("duplicate
// watch ID"), which the Mux then retried every 50 ms for ever (found in
// review). Its pause now doubles with each refusal, up to 5 s (not timed
// here).
func TestRefusedWatchIsCreatedAgainUnderNewID(t *testing.T) {
	c := fencingtest.Single(t)
	etcdtest.EnableAuth(t, c)
	ctx := fencingtest.Context(t, wait)
	for _, step := range []func() error{
		func() error { _, err := c.Admin.UserAdd(ctx, "wo", "wo"); return err },
		func() error { _, err := c.Admin.RoleAdd(ctx, "wo"); return err },
		func() error {
			_, err := c.Admin.RoleGrantPermission(ctx, "wo", "wo/", clientv3.GetPrefixRangeEnd("wo/"), clientv3.PermissionType(clientv3.PermWrite))
			return err
		},
		func() error { _, err := c.Admin.UserGrantRole(ctx, "wo", "wo"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	var sent sentWatches
	cli := c.Client(t, etcdtest.WithAuth("wo", "wo"), sent.option)
	p, err := cli.Put(ctx, "wo/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	life, end := context.WithCancelCause(context.Background())
	var wg sync.WaitGroup
	defer func() { end(context.Canceled); wg.Wait() }()
	o := ownwatch.Owner{Client: cli, Key: "wo/k", Rev: p.Header.Revision, Life: life, Owners: new(ownwatch.Registry),
		Mux: ownwatch.NewMux(cli, life, func(f func()) bool { wg.Go(f); return true })}
	w := ownwatch.Start(context.Background(), o)
	defer w.Stop(context.Canceled)
	fencingtest.WaitFor(t, wait, "three creates", func() bool { ids, _ := sent.creates(); return len(ids) >= 3 })
	ids, cancelledFirst := sent.creates()
	seen := map[int64]bool{}
	for i, id := range ids {
		if seen[id] {
			t.Fatalf("create %d reuses ID %d: %v", i, id, ids)
		}
		seen[id] = true
	}
	for i, ok := range cancelledFirst {
		if !ok {
			t.Errorf("create %d was not preceded by a cancel of ID %d", i+1, ids[i])
		}
	}
	select {
	case <-w.Armed():
		t.Fatal("a watch of a key the user may not read armed")
	default:
	}
}
