package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/guard"
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

func (r *runner) recordFor(t *election.Term) (string, error) {
	b, err := json.Marshal(record{
		Lease: strconv.FormatInt(int64(t.Session().Lease()), 16),
		TTLMs: t.Session().TTL().Milliseconds(),
		Token: t.Token().String(),
		Owner: r.identity,
	})
	return string(b), err
}

// claim waits until no other runner's command may still run, then writes
// this term's record, guarded by the term. It returns the record's value,
// which release needs, or an error when the term ends first.
func (r *runner) claim(ctx context.Context, t *election.Term) (string, error) {
	key := recordKey(t.Token().Name)
	mine, err := r.recordFor(t)
	if err != nil {
		return "", err
	}
	lease := strconv.FormatInt(int64(t.Session().Lease()), 16)
	for {
		resp, err := r.cli.Get(ctx, key)
		if err != nil {
			if ctx.Err() != nil {
				return mine, context.Cause(ctx)
			}
			r.log.Warn("reading the running record failed; retrying", "err", err)
			pause(ctx, recordCheck)
			continue
		}
		var mod int64 // 0: no record
		if len(resp.Kvs) > 0 {
			var prev record
			kv := resp.Kvs[0]
			mod = kv.ModRevision
			if err := json.Unmarshal(kv.Value, &prev); err == nil && prev.Lease != lease {
				if !r.waitPrevious(ctx, key, prev, mod) {
					continue // the record changed, or ctx ended: look again
				}
			}
			// A record of this session's is from an earlier term whose
			// command is dead: work returns only once its group is empty.
			// An unreadable one is not ours to respect.
		}
		tx, err := guard.Txn(ctx, t).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
			Then(clientv3.OpPut(key, mine)).Commit()
		switch {
		case errors.Is(err, guard.ErrNotOwner) || ctx.Err() != nil:
			return mine, fmt.Errorf("term ended before the command started: %w", context.Cause(ctx))
		case err != nil:
			r.log.Warn("writing the running record failed; retrying", "err", err)
		case tx.Succeeded:
			return mine, nil
		}
	}
}

// waitPrevious waits while another runner's record says its command may
// still run. It returns true when that record may be taken over (its lease
// has been gone for a full TTL), false when the record changed or ctx ended.
func (r *runner) waitPrevious(ctx context.Context, key string, prev record, mod int64) bool {
	id, err := strconv.ParseInt(prev.Lease, 16, 64)
	if err != nil {
		return true // not a record singleton wrote
	}
	r.log.Info("waiting for the previous leader's command to end", "owner", prev.Owner, "token", prev.Token)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := r.cli.Watch(wctx, key, clientv3.WithRev(mod+1))
	var goneAt time.Time
	for {
		wait := recordCheck
		if goneAt.IsZero() {
			ttl, err := r.cli.TimeToLive(ctx, clientv3.LeaseID(id))
			if err == nil && ttl.TTL == -1 {
				goneAt = time.Now()
				r.log.Info("previous leader's lease is gone; its command may run until one TTL has passed",
					"owner", prev.Owner, "ttl", time.Duration(prev.TTLMs)*time.Millisecond)
			}
		}
		if !goneAt.IsZero() {
			wait = time.Until(goneAt.Add(time.Duration(prev.TTLMs) * time.Millisecond))
			if wait <= 0 {
				r.log.Warn("taking over the running record of a runner that did not remove it", "owner", prev.Owner, "token", prev.Token)
				return true
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-changed: // removed or replaced (or the watch broke): read it again
			timer.Stop()
			return false
		case <-timer.C:
		}
	}
}

// release removes this term's record once its command's group is empty, so
// the next leader may start. It tries for one TTL; if etcd cannot be reached
// that long it closes the session, whose lease then ends, and the next
// leader takes the record over one TTL later.
func (r *runner) release(t *election.Term, mine string) {
	ctx, cancel := context.WithTimeout(context.Background(), t.Session().TTL())
	defer cancel()
	key := recordKey(t.Token().Name)
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
