package election

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// behind follows the key right behind a leader's through a queue's events
// after a read: the first key created takes an empty place, later ones
// queue behind it, and the end of the key behind asks for a read.
func TestBehind(t *testing.T) {
	kv := func(key string, create, mod int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(key), CreateRevision: create, ModRevision: mod}
	}
	put := func(key string, create, mod int64) *clientv3.Event {
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(key, create, mod)}
	}
	del := func(key string, mod int64) *clientv3.Event {
		return &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: kv(key, 0, mod)}
	}
	b := kv("b", 5, 5)
	for _, tc := range []struct {
		name     string
		next     *mvccpb.KeyValue
		evs      []*clientv3.Event
		want     string
		wantRead bool
	}{
		{"alone, one joins", nil, []*clientv3.Event{put("b", 11, 11), put("c", 12, 12)}, "b", false},
		{"alone, an old event", nil, []*clientv3.Event{put("x", 9, 9)}, "", false},
		{"alone, a value rewritten", nil, []*clientv3.Event{put("a", 3, 11)}, "", false},
		{"next stays", b, []*clientv3.Event{put("c", 11, 11), del("c", 12)}, "b", false},
		{"next goes", b, []*clientv3.Event{del("b", 11), put("c", 12, 12)}, "", true},
		{"next went before the read", b, []*clientv3.Event{del("b", 10)}, "b", false},
	} {
		next, read := behind(tc.next, tc.evs, 10)
		got := ""
		if next != nil {
			got = string(next.Key)
		}
		if got != tc.want || read != tc.wantRead {
			t.Errorf("%s: next %q, read %v; want %q, %v", tc.name, got, read, tc.want, tc.wantRead)
		}
	}
}
