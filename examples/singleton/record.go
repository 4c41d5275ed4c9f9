package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/guard"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The running record closes the one gap the election leaves: etcd elects
// the next leader the moment the term's key is gone, and an operator who
// deletes the key or revokes the lease removes it while the old command may
// still be finishing its SIGTERM grace, or, if the old runner is partitioned,
// running until its deadline. So the leader records its term before it
// starts the command and removes the record once the command's process
// group is empty; the next leader starts only after that. The record is not
// attached to a lease (a revoke must not remove it): a runner that dies
// leaves it behind, and the next leader takes it over once the old lease has
// been gone for a full TTL, by when the old keeper has killed its group
// whatever happened to the old runner.

// recordKey is where singleton keeps the running record of name: among the
// name's own keys ("leasehold/NAME#singleton"), so that the grant that lets
// a runner campaign for NAME covers its record too.
func recordKey(name string) string {
	p, _ := inspect.KeyPrefix(fencing.DefaultRoot, "", name) // the name was validated by parse
	return p + "singleton"
}

// recordKeys are the running records a holder of name may claim: the one
// record of a term, or with --permits, one per permit of the name's limit
// ("NAME#singleton/0" to "/N-1"), one per command that may run, so that N
// records bound the commands whatever happened to the runners that wrote
// them. All are read and watched as one range: from, with rng.
func (r *runner) recordKeys(name string) (keys []string, from string, rng []clientv3.OpOption) {
	if r.cfg.permits == 0 {
		return []string{recordKey(name)}, recordKey(name), nil
	}
	keys = make([]string, max(r.limit.Load(), 1))
	for i := range keys {
		keys[i] = recordKey(name) + "/" + strconv.Itoa(i)
	}
	return keys, recordKey(name) + "/", []clientv3.OpOption{clientv3.WithPrefix()}
}

// record is the value of the running record.
type record struct {
	Lease string `json:"lease"` // hex, as etcdctl shows leases
	TTLMs int64  `json:"ttl_ms"`
	Token string `json:"token"`
	Owner string `json:"owner"` // host/pid of the runner
}

// recordCheck is how often a waiting leader asks whether a dead runner's
// lease is gone; the record's removal itself is watched.
const recordCheck = time.Second

func (r *runner) recordFor(t guard.Owner) (string, error) {
	b, err := json.Marshal(record{
		Lease: strconv.FormatInt(int64(t.Session().Lease()), 16),
		TTLMs: t.Session().TTL().Milliseconds(),
		Token: t.Token().String(),
		Owner: r.identity,
	})
	return string(b), err
}

// other is a running record of another runner's command.
type other struct {
	key  string
	mod  int64
	prev record
}

// claim waits until a running record may be taken (none written, one of
// this session's earlier terms, or one whose runner's lease has been gone
// for a full TTL), then writes this term's there, guarded by the term. It
// returns the record's key and value, which release needs, or an error
// when the term ends first.
func (r *runner) claim(ctx context.Context, t guard.Owner) (key, mine string, err error) {
	keys, from, rng := r.recordKeys(t.Token().Name)
	if mine, err = r.recordFor(t); err != nil {
		return "", "", err
	}
	lease := strconv.FormatInt(int64(t.Session().Lease()), 16)
	for {
		resp, err := r.cli.Get(ctx, from, rng...)
		if err != nil {
			if ctx.Err() != nil {
				return key, mine, context.Cause(ctx)
			}
			r.log.Warn("reading the running record failed; retrying", "err", err)
			pause(ctx, recordCheck)
			continue
		}
		var (
			mod    int64 = -1 // -1: no record may be taken
			others []other
		)
		written := map[string]*mvccpb.KeyValue{}
		for _, kv := range resp.Kvs {
			written[string(kv.Key)] = kv
		}
		for _, k := range keys {
			kv := written[k]
			if kv == nil {
				if mod < 0 {
					key, mod = k, 0
				}
				continue
			}
			var prev record
			if err := json.Unmarshal(kv.Value, &prev); err != nil || prev.Lease == lease {
				// A record of this session's is from an earlier term whose
				// command is dead: work returns only once its group is
				// empty. It goes first: it may be one a lost reply left. An
				// unreadable one is not ours to respect.
				key, mod = k, kv.ModRevision
				break
			}
			others = append(others, other{k, kv.ModRevision, prev})
		}
		if mod < 0 {
			o, ok := r.waitPrevious(ctx, from, rng, resp.Header.Revision, others)
			if !ok {
				continue // a record changed, or ctx ended: look again
			}
			key, mod = o.key, o.mod
		}
		tx, err := guard.Txn(ctx, t).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
			Then(clientv3.OpPut(key, mine)).Commit()
		switch {
		case errors.Is(err, guard.ErrNotOwner) || ctx.Err() != nil:
			return key, mine, fmt.Errorf("term ended before the command started: %w", context.Cause(ctx))
		case err != nil:
			r.log.Warn("writing the running record failed; retrying", "err", err)
		case tx.Succeeded:
			return key, mine, nil
		}
	}
}

// waitPrevious waits while other runners' records (those at from with
// rng, read at rev) say their commands may still run. It returns the
// record that may be taken over (its lease has been gone for a full TTL),
// or false when any record changed or ctx ended.
func (r *runner) waitPrevious(ctx context.Context, from string, rng []clientv3.OpOption, rev int64, others []other) (other, bool) {
	for _, o := range others {
		r.log.Info("waiting for a previous holder's command to end", "owner", o.prev.Owner, "token", o.prev.Token)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := r.cli.Watch(wctx, from, append(rng, clientv3.WithRev(rev+1))...)
	goneAt := make([]time.Time, len(others))
	for {
		wait := recordCheck
		for i, o := range others {
			if goneAt[i].IsZero() {
				if !leaseGone(ctx, r.cli, o.prev.Lease) {
					continue
				}
				goneAt[i] = time.Now()
				r.log.Info("previous holder's lease is gone; its command may run until one TTL has passed",
					"owner", o.prev.Owner, "ttl", time.Duration(o.prev.TTLMs)*time.Millisecond)
			}
			left := time.Until(goneAt[i].Add(time.Duration(o.prev.TTLMs) * time.Millisecond))
			if left <= 0 {
				r.log.Warn("taking over the running record of a runner that did not remove it", "owner", o.prev.Owner, "token", o.prev.Token)
				return o, true
			}
			wait = min(wait, left)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return other{}, false
		case <-changed: // removed or replaced (or a watch broke): read them again
			timer.Stop()
			return other{}, false
		case <-timer.C:
		}
	}
}

// leaseGone reports whether etcd says the lease (in hex) is gone; a lease
// that is not one, as in a record singleton did not write, is gone.
func leaseGone(ctx context.Context, cli *clientv3.Client, lease string) bool {
	id, err := strconv.ParseInt(lease, 16, 64)
	if err != nil {
		return true
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(id))
	return err == nil && ttl.TTL == -1
}

// release removes this term's record once its command's group is empty, so
// the next leader may start. It tries for one TTL; if etcd cannot be reached
// that long it closes the session, whose lease then ends, and the next
// leader takes the record over one TTL later.
func (r *runner) release(t guard.Owner, key, mine string) {
	if key == "" {
		return // no record was written
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.Session().TTL())
	defer cancel()
	for {
		_, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", mine)).Then(clientv3.OpDelete(key)).Commit()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			r.log.Warn("could not remove the running record; ending the session instead", "err", err)
			t.Session().Close(ctx)
			return
		}
		pause(ctx, 100*time.Millisecond)
	}
}

// pause waits for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
