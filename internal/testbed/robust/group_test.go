package robust_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	groupName  = "robust-group"
	groupNames = 12
	// groupCounters holds one counter per name: "COUNT TOKEN", the token
	// of the term that wrote it.
	groupCounters = "robust/group/"
)

func groupNameList() []string {
	names := make([]string, groupNames)
	for i := range names {
		names[i] = fmt.Sprintf("%s/job-%d", groupName, i)
	}
	return names
}

// TestGroupUnderFaults runs election.RunGroup replicas, two in this process
// and two in subprocesses, of mixed ranks and weights (rankOf), each also an
// election.Run replica of one more name that drains itself now and then
// (runReplica), while faults hit them and etcd: each name's work
// makes guarded increments of the name's own counter. Every increment must
// be made under the term that led the name at its commit revision, every
// counter must count each increment once (acknowledged ones all there), and
// once the faults stop the group must be balanced again: every name led by
// its assigned replica, none over its cap, a lower-ranked replica leading
// none, and the Run's name led.
func TestGroupUnderFaults(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	maxTime, _ := runLength()
	hist := watchHistory(t, c, "")
	h := newHarness(t, c, "group", groupName)
	h.helper, h.extra = "group-worker", []func(){h.deleteLeader, h.deleteMember}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range 2 {
		h.inProcessGroup(ctx, &wg, fmt.Sprint("g", i))
	}
	for i := range 2 {
		h.subprocess(fmt.Sprint("q", i))
	}
	events := h.collect()
	start := time.Now()
	h.faultLoop(ctx, hist, func() bool { return time.Since(start) > maxTime })
	h.mu.Lock()
	live := 2 + len(h.procs) // a killed subprocess was replaced
	h.mu.Unlock()
	waitGroupBalanced(t, c, live)
	waitRunLed(t, c)
	waitLeases(t, c, 3*live)
	cancel()
	h.stopAll()
	wg.Wait()
	all := events()
	raw := hist.events(t, c)
	acked, incs := 0, 0
	for _, e := range all {
		if e.kind == "write" && e.outcome == "ok" {
			acked++
		}
	}
	for _, v := range groupViolations(raw, all) {
		t.Error(v)
	}
	for _, ev := range raw {
		if strings.HasPrefix(string(ev.Kv.Key), groupCounters) && ev.Type == clientv3.EventTypePut {
			incs++
		}
	}
	single := acknowledged(all, runName)
	t.Logf("group: %v, %d increments committed (%d acknowledged, %d of them %s's), faults %v", time.Since(start).Round(time.Second), incs, acked, single, runName, h.faults)
	if acked < groupNames || single == 0 {
		t.Errorf("%d acknowledged increments, %d of %s: a workload did not run", acked, single, runName)
	}
}

// waitGroupBalanced waits until inspect reports n replicas, every name led by
// the replica the group assigns it to, none over its cap.
func waitGroupBalanced(t *testing.T, c *fencingtest.Cluster, n int) {
	var last election.Group
	var lastErr error
	fencingtest.WaitFor(t, time.Minute, fmt.Sprintf("the group balanced over %d replicas", n), func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		last, lastErr = election.ReadGroup(ctx, c.Admin, fencing.DefaultRoot, groupName)
		if lastErr != nil || len(last.Replicas) != n || last.Misplaced != 0 || len(last.Names) != groupNames {
			return false
		}
		for _, r := range last.Replicas {
			if r.Leads > r.Cap { // 0 for a lower-ranked replica
				return false
			}
		}
		return true
	})
}

// groupViolations checks the history of the counters against the history
// of the elections: each put of a counter adds one to the one before and
// was made by the term leading its name at that revision; each acknowledged
// increment is in the history at its revision.
func groupViolations(raw []*clientv3.Event, events []event) []string {
	var out []string
	type put struct{ count, token int64 }
	puts := map[string]map[int64]put{} // name → revision → put
	last := map[string]int64{}
	lives := map[string][]*keyLife{} // name → its election keys' lives
	live := map[string]*keyLife{}
	for _, ev := range raw {
		k := string(ev.Kv.Key)
		if name, ok := strings.CutPrefix(k, groupCounters); ok {
			if ev.Type != clientv3.EventTypePut {
				out = append(out, fmt.Sprintf("counter of %s deleted", name))
				continue
			}
			f := strings.Fields(string(ev.Kv.Value))
			count, _ := strconv.ParseInt(f[0], 10, 64)
			token, _ := strconv.ParseInt(f[1], 10, 64)
			if count != last[name]+1 {
				out = append(out, fmt.Sprintf("counter of %s went from %d to %d at revision %d", name, last[name], count, ev.Kv.ModRevision))
			}
			last[name] = count
			if puts[name] == nil {
				puts[name] = map[int64]put{}
			}
			puts[name][ev.Kv.ModRevision] = put{count, token}
			if o := ownerOf(lives[name], ev.Kv.ModRevision); o != token {
				out = append(out, fmt.Sprintf("%s written with token %d at revision %d while %d led it", name, token, ev.Kv.ModRevision, o))
			}
			continue
		}
		kind, name, ok := keyspace.ParseKey(fencing.DefaultRoot, k)
		if !ok || kind != string(fencing.KindElection) {
			continue
		}
		if ev.Type == clientv3.EventTypePut && ev.IsCreate() {
			l := &keyLife{created: ev.Kv.CreateRevision}
			lives[name] = append(lives[name], l)
			live[k] = l
		} else if ev.Type == clientv3.EventTypeDelete && live[k] != nil {
			live[k].deleted = ev.Kv.ModRevision
			delete(live, k)
		}
	}
	for _, e := range events {
		if e.kind != "write" || e.outcome != "ok" {
			continue
		}
		if p, ok := puts[e.name][e.rev]; !ok || p.count != e.value || p.token != e.token {
			out = append(out, fmt.Sprintf("%s's acknowledged increment of %s to %d at revision %d is not in the history", e.worker, e.name, e.value, e.rev))
		}
	}
	return out
}

// groupWorker is one replica of the group until ctx ends: each term's work
// increments its name's counter, with guarded read-modify-writes, until the
// term ends. The replica runs runName's singleton beside the group
// (runReplica), on the same client.
func groupWorker(ctx context.Context, id string, cli *clientv3.Client, emit func(event)) {
	var single sync.WaitGroup
	single.Go(func() { runReplica(ctx, id, cli, emit) })
	defer single.Wait()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	var mu sync.Mutex // guards rng
	election.RunGroup(ctx, cli, groupName, groupNameList(), func(ctx context.Context, term *election.Term) error {
		name, tok := term.Token().Name, term.Token().Revision
		emit(event{worker: id, kind: "acquire", token: tok, name: name})
		for ctx.Err() == nil {
			increment(ctx, cli, term, id, emit)
			mu.Lock()
			d := time.Duration(20+rng.IntN(60)) * time.Millisecond
			mu.Unlock()
			pause(ctx, d)
		}
		return nil
	}, append(rankOf(id), election.WithBackoff(10*time.Millisecond, 500*time.Millisecond),
		election.WithSessionOptions(fencing.WithTTL(ttl), fencing.WithIdentity(id)))...)
}

// rankOf mixes ranks and weights in the group: g0 takes two shares; the
// subprocesses q1, q3, … rank below the others, and lead names only while
// the higher replicas are cut off, paused or dead.
func rankOf(id string) []election.RunOption {
	switch {
	case id == "g0":
		return []election.RunOption{election.Priority(1), election.Weight(2)}
	case strings.HasPrefix(id, "q") && (id[len(id)-1]-'0')%2 == 1:
		return []election.RunOption{election.Priority(0)}
	}
	return []election.RunOption{election.Priority(1)}
}

// increment reads the term's counter and writes one more, guarded by the
// term and by the counter's revision.
func increment(ctx context.Context, cli *clientv3.Client, term *election.Term, id string, emit func(event)) {
	name, tok := term.Token().Name, term.Token().Revision
	key := groupCounters + name
	rctx, cancel := context.WithTimeout(ctx, ttl)
	resp, err := cli.Get(rctx, key)
	cancel()
	if err != nil {
		return
	}
	var n, rev int64
	if len(resp.Kvs) > 0 {
		n, _ = strconv.ParseInt(strings.Fields(string(resp.Kvs[0].Value))[0], 10, 64)
		rev = resp.Kvs[0].ModRevision
	}
	// Sent even if ctx ended meanwhile, as by a process that paused after
	// its last check: the guard has to stop it.
	wctx, cancel := context.WithTimeout(context.Background(), ttl)
	defer cancel()
	txn, err := guard.Txn(wctx, term).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, fmt.Sprintf("%d %d", n+1, tok))).Commit()
	e := event{worker: id, kind: "write", token: tok, value: n + 1, name: name}
	e.outcome, e.rev = outcome(txn, err)
	emit(e)
}

// groupWorkerHelper runs groupWorker in a subprocess until stdin closes.
// Args: name, "group", the group, endpoints...
func groupWorkerHelper(args []string) int {
	return asHelper(args[3:], func(ctx context.Context, cli *clientv3.Client) {
		var mu sync.Mutex // lines from several names' works
		groupWorker(ctx, args[0], cli, func(e event) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Println(e)
		})
	})
}

// deleteLeader deletes the leader key of a random name (the group's, or
// runName), as an operator might.
func (h *harness) deleteLeader() {
	names := append(groupNameList(), runName)
	h.mu.Lock()
	name := names[h.rng.IntN(len(names))]
	h.mu.Unlock()
	h.deleteOne(keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindElection), name), "delete-leader", clientv3.WithFirstCreate()...)
}

// deleteMember deletes a random replica's membership key: it must rejoin.
func (h *harness) deleteMember() {
	h.deleteOne(keyspace.Prefix(fencing.DefaultRoot, keyspace.KindGroup, groupName), "delete-member", clientv3.WithPrefix())
}

// deleteOne deletes one of the keys a read of prefix with opts returns.
func (h *harness) deleteOne(prefix, kind string, opts ...clientv3.OpOption) {
	ctx, cancel := context.WithTimeout(h.t.Context(), 5*time.Second)
	defer cancel()
	resp, err := h.c.Admin.Get(ctx, prefix, append(opts, clientv3.WithKeysOnly())...)
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	h.mu.Lock()
	k := resp.Kvs[h.rng.IntN(len(resp.Kvs))].Key
	h.mu.Unlock()
	if _, err := h.c.Admin.Delete(ctx, string(k)); err == nil {
		h.count(kind)
	}
}
