package election

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/assign"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/watchstream"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The membership protocol of a RunGroup round: each replica keeps one key
// under the group's prefix, leased to its session, naming the names it lists
// and those it declines; every replica reads and watches all of them and
// computes the same assignment from the same set (see reassign).

// follow reads the members, then watches them, reassigning the names at each
// change, until ctx ends or a name's loop ends RunGroup.
func (r *round) follow(ctx context.Context) error {
	for fails := 0; ctx.Err() == nil; {
		rev, err := r.read(ctx)
		if err == nil {
			err = r.watch(ctx, rev)
		}
		switch {
		case ends(err):
			return err
		case ctx.Err() != nil || errors.Is(err, retry.ErrClientClosed):
			return nil // a closed client ends the session, and the round
		case errors.Is(err, errWatchBroken) || errors.Is(err, rpctypes.ErrNoLeader):
			// Compacted, closed, or the member lost its raft leader (the
			// read waits for a new one): read again, quietly.
			fails = 0
			continue
		}
		r.g.log.Warn("membership watch failed; reading again", "err", err)
		fails++
		backoff(ctx, r.g.cfg.backoffMin, r.g.cfg.backoffMax, fails)
	}
	return nil
}

// read reads every member and reassigns; it returns the read's revision.
func (r *round) read(ctx context.Context) (int64, error) {
	var resp *clientv3.GetResponse
	var unsure bool
	err := retry.Do(ctx, r.link.Client, r.link.Latency, &unsure, func(ctx context.Context) (err error) {
		resp, err = r.s.Client().Get(ctx, r.prefix, clientv3.WithPrefix())
		return err
	})
	if err != nil {
		return 0, err
	}
	r.members = map[string]assign.Member{}
	for _, kv := range resp.Kvs {
		r.update(string(kv.Key), kv.Value)
	}
	if err := r.rejoin(ctx); err != nil {
		return 0, err
	}
	r.reassign()
	return resp.Header.Revision, nil
}

// update records the member key key with value; one that cannot be decoded
// (not written by RunGroup) is left out.
func (r *round) update(key string, value []byte) {
	m, err := assign.Decode(key, value)
	if err != nil {
		// As a fresh read would: whoever wrote it over a member's value,
		// that member is not one until it writes its own again.
		r.g.log.Warn("ignoring a membership key", "err", err)
		delete(r.members, key)
		return
	}
	r.members[key] = m
}

// rejoin writes this replica's membership key again when someone deleted it.
func (r *round) rejoin(ctx context.Context) error {
	if _, ok := r.members[r.key]; ok {
		return nil
	}
	r.rev = 0
	return r.putMember(ctx)
}

// watch follows the members from rev on, and the names' loops, until the
// watch breaks, ctx ends or a name's loop ends RunGroup.
func (r *round) watch(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wctx = watchstream.Context(wctx, r.s.Client())
	wch := r.s.Client().Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		select {
		case <-ctx.Done():
			return nil
		case resp, ok := <-wch:
			if !ok || resp.CompactRevision != 0 {
				return errWatchBroken
			}
			if err := resp.Err(); err != nil {
				watchstream.Ended(wctx, r.s.Client(), resp)
				return retry.Typed(err)
			}
			for _, ev := range resp.Events {
				if string(ev.Kv.Key) == r.key && ev.Kv.ModRevision < r.rev {
					continue // an older write of ours: putMember already applied a later one
				}
				if ev.Type == clientv3.EventTypeDelete {
					delete(r.members, string(ev.Kv.Key))
				} else {
					r.update(string(ev.Kv.Key), ev.Kv.Value)
				}
			}
			if err := r.rejoin(ctx); err != nil {
				return err
			}
			r.reassign()
		case ev := <-r.events:
			if !ev.decline {
				return ev.err
			}
			if !r.decline(ev.name) {
				continue
			}
			if err := r.putMember(ctx); err != nil {
				return err
			}
			r.reassign()
		case <-r.draining: // WithDrain's switch changed: say so
			if err := r.putMember(ctx); err != nil {
				return err
			}
			r.reassign()
		case <-r.expiry.C:
			r.undecline()
			if err := r.putMember(ctx); err != nil {
				return err
			}
			r.reassign()
		}
	}
}

// decline records that this replica asks not to be given name, and reports
// whether that is news (a name declined already only has its decline
// extended).
func (r *round) decline(name string) bool {
	_, already := r.declined[name]
	if !already {
		r.g.log.Warn("declining a name whose terms keep failing", "name", name, "for", r.g.cfg.declineFor)
	}
	r.declined[name] = time.Now().Add(r.g.cfg.declineFor)
	r.armExpiry()
	return !already
}

// undecline forgets the declines that ended.
func (r *round) undecline() {
	for n, until := range r.declined {
		if !time.Now().Before(until) {
			delete(r.declined, n)
		}
	}
	r.armExpiry()
}

func (r *round) armExpiry() {
	r.expiry.Stop()
	if len(r.declined) > 0 {
		r.expiry.Reset(time.Until(slices.MinFunc(slices.Collect(maps.Values(r.declined)), time.Time.Compare)))
	}
}

// putMember writes this replica's membership key over its last known write,
// so that an attempt given up and applied late cannot undo a later write.
func (r *round) putMember(ctx context.Context) error {
	m := assign.Member{Key: r.key, ID: r.link.Identity, Names: r.g.names, Declined: slices.Sorted(maps.Keys(r.declined)),
		Priority: r.g.cfg.priority, Weight: r.g.cfg.weight}
	if d := r.g.cfg.drain; d != nil {
		m.Drain, r.draining = d.state()
	}
	val := assign.Encode(m)
	var unsure bool
	err := retry.Do(ctx, r.link.Client, r.link.Latency, &unsure, func(ctx context.Context) error {
		for {
			resp, err := r.s.Client().Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(r.key), "=", r.rev)).
				Then(clientv3.OpPut(r.key, val, clientv3.WithLease(r.s.Lease()))).
				Else(clientv3.OpGet(r.key)).Commit()
			if err != nil {
				return err
			}
			if resp.Succeeded {
				r.rev = resp.Header.Revision
				return nil
			}
			r.rev = 0 // the key is gone: create it again
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				if r.rev = kvs[0].ModRevision; string(kvs[0].Value) == val {
					return nil
				}
			}
		}
	})
	if err == nil {
		r.members[r.key] = m // what the watch will say, known now
	}
	return err
}
