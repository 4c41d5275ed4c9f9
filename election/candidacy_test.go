package election

import (
	"log/slog"
	"testing"

	"github.com/leasehold/leasehold/internal/rank"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A read answered after the watch delivered later changes (a campaign's
// read of the records, taken with its win) does not bring back a record
// whose deletion the view has applied: the watch will not tell it again, and
// the dead record would stay in the view for good. A newer read still
// replaces the view, and a write's read gives the replica its rank even
// when the view is newer than that read.
func TestViewNeverGoesBack(t *testing.T) {
	c := &candidacy{prefix: "p/", log: slog.New(slog.DiscardHandler), changed: make(chan struct{}),
		self: rank.Record{Key: "p/a", ID: "a", Priority: []int64{1}}}
	kv := func(id string, mod int64) *mvccpb.KeyValue {
		r := rank.Record{ID: id, Priority: []int64{1}}
		return &mvccpb.KeyValue{Key: []byte("p/" + id), Value: []byte(rank.Encode(r)), CreateRevision: mod, ModRevision: mod}
	}
	ids := func() (out []string) {
		for key := range c.records {
			out = append(out, key)
		}
		return out
	}
	c.replace([]*mvccpb.KeyValue{kv("a", 3), kv("c", 2)}, 5, nil)
	c.apply([]*clientv3.Event{{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte("p/c"), ModRevision: 9}}}, 9)
	c.replace([]*mvccpb.KeyValue{kv("a", 3), kv("c", 2)}, 7, nil) // read at 7, answered late
	if got := ids(); len(got) != 1 || got[0] != "p/a" {
		t.Fatalf("view after a read older than the watch: %q, want [p/a]", got)
	}
	c.replace([]*mvccpb.KeyValue{kv("a", 3), kv("d", 10)}, 10, nil)
	if got := ids(); len(got) != 2 {
		t.Fatalf("view after a newer read: %q, want p/a and p/d", got)
	}
	c.apply([]*clientv3.Event{{Type: clientv3.EventTypePut, Kv: kv("e", 12)}}, 12)
	drained := c.self
	drained.Drain = true
	c.replace(nil, 11, &drained) // the write's own read, answered after the watch's event at 12
	if !c.self.Drain || len(c.records) != 3 {
		t.Fatalf("after a late write's read: self %+v, %d records; want drained, 3", c.self, len(c.records))
	}
}
