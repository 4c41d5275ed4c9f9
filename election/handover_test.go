package election_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/rank"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// raceRounds is how often the tests below repeat a stop that races a
// replica's view: enough to catch a race lost once in 20 with 95%
// confidence (1 - (19/20)^60).
const raceRounds = 60

// A rolling upgrade in which the old leader is stopped the moment its
// successor's record appears (a Deployment with maxUnavailable 0 stops the
// old pod once the new one is ready) moves leadership once: the leaving
// leader waits until the preferred newcomer queues right behind it, so the
// old replica queued there, outranked and about to withdraw, never takes the
// key. The stop races the leader's own view of the record: repeated.
func TestPriorityLeaderStoppedAsPreferredRecordAppears(t *testing.T) {
	c := fencingtest.Single(t)
	records := keyspace.Prefix(fencing.DefaultRoot, keyspace.KindCandidate, fleetName)
	queue := keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindElection), fleetName)
	for i := range raceRounds {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			f := newFleet(t, c)
			f.start("b", nil, election.PriorityVersion("v1.4.2"))
			f.waitLeader("b")
			f.start("c", nil, election.PriorityVersion("v1.4.2"))
			f.waitQueued("c")
			owners := ownerHistory(t, c, queue)
			appeared := recordAppears(t, c, records, "b2")
			f.start("b2", nil, election.PriorityVersion("v1.5.0"))
			fencingtest.Receive(t, appeared, "b2's record")
			f.stop("b")
			f.waitLeader("b2")
			f.check("b", "b2")
			if got := owners(); !slices.Equal(got, []string{"b", "b2"}) {
				t.Fatalf("leadership in etcd went %v, want [b b2]", got)
			}
			f.stop("c")
			f.stop("b2")
		})
	}
}

// recordAppears returns a channel that receives once the candidate record
// of id is written under records: a watch made before the caller starts id.
func recordAppears(t *testing.T, c *fencingtest.Cluster, records, id string) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(fencingtest.Context(t, wait))
	t.Cleanup(cancel)
	wch := c.Admin.Watch(ctx, records, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("watch of %s: %v", records, resp.Err())
	}
	appeared := make(chan struct{}, 1)
	go func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				if r, err := rank.Decode(string(ev.Kv.Key), ev.Kv.Value); err == nil && ev.IsCreate() && r.ID == id {
					appeared <- struct{}{}
					cancel()
					return
				}
			}
		}
	}()
	return appeared
}

// ownerHistory follows the queue under prefix in etcd, revision by
// revision, from a read and a watch from the revision after it: who owned
// it (the value of its oldest key, or "nobody"), each change once, as the
// returned function reports so far. Even an owner that lasted one revision
// is there, which neither Observe (it may skip a state a slow reader has
// not taken) nor the replicas' own reports (a term ended before its
// campaign returned) would show.
func ownerHistory(t *testing.T, c *fencingtest.Cluster, prefix string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := c.Admin.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		keys[string(kv.Key)] = kv
	}
	var mu sync.Mutex
	var history []string
	note := func() {
		owner := "nobody"
		var oldest int64
		for _, kv := range keys {
			if oldest == 0 || kv.CreateRevision < oldest {
				owner, oldest = string(kv.Value), kv.CreateRevision
			}
		}
		mu.Lock()
		if len(history) == 0 || history[len(history)-1] != owner {
			history = append(history, owner)
		}
		mu.Unlock()
	}
	note()
	wch := c.Admin.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range wch {
			for i, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					delete(keys, string(ev.Kv.Key))
				} else if ev.IsCreate() {
					keys[string(ev.Kv.Key)] = ev.Kv
				}
				if i == len(resp.Events)-1 || resp.Events[i+1].Kv.ModRevision != ev.Kv.ModRevision {
					note() // a revision's events all applied
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(history)
	}
}

// A drained leader whose only other replica has just stopped keeps its
// term: it judges the drain on the view read along with its record's write,
// in which the stopped replica's record has gone, not on a view that may
// still hold it. The stop races the leader's view: repeated.
func TestDrainedLeaderAloneKeepsItsTerm(t *testing.T) {
	c := fencingtest.Single(t)
	for i := range raceRounds {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			f := newFleet(t, c)
			var dc, da election.Drain
			f.start("c", nil, election.WithDrain(&dc))
			f.waitLeader("c")
			f.start("a", nil, election.WithDrain(&da))
			f.waitQueued("a")
			f.stop("c") // its record went with its session
			da.Set(true)
			f.waitLeader("a")
			// a writes its record at each change of the drain, one after
			// the other: once the second is in etcd, the first's view was
			// judged.
			f.waitDrained("a", true)
			da.Set(false)
			f.waitDrained("a", false)
			f.stop("a")
			f.check("c", "a")
			f.mu.Lock()
			defer f.mu.Unlock()
			if causes := f.causes["a"]; len(causes) != 1 || !errors.Is(causes[0], context.Canceled) {
				t.Fatalf("a's works ended with %v, want once, when its Run was stopped", causes)
			}
		})
	}
}

// waitDrained waits until id's record says drained.
func (f *fleet) waitDrained(id string, drained bool) {
	f.t.Helper()
	fencingtest.WaitFor(f.t, wait, id+"'s record drained="+strconv.FormatBool(drained), func() bool {
		for _, c := range candidatesOf(f.t, f.c, fleetName) {
			if c.ID == id {
				return c.Drain == drained
			}
		}
		return false
	})
}
