package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/examples/internal/connect"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Between holds, as election.Run's default backoff between terms.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// permits runs the command under one permit of the semaphore NAME at a
// time, as election.Run runs it under a term: it acquires a permit, runs
// the command until it exits or the permit is lost, releases, and again
// after a backoff unless the command succeeded. A limit that disagrees
// with the keys queued (fencing.ErrLimitMismatch) ends it before its first
// permit: the replicas would enforce two limits. After one, it keeps trying
// for mismatchGrace TTLs before it ends: a replica of another limit that
// slipped in (while this one was paused past its TTL, say) is most likely
// the mistake, and exits on its own first acquire or is stopped; a healthy
// replica should not exit because of it. A mismatch that outlasts that
// grace (a change of limit, this replica left behind) ends it too.
func (r *runner) permits(ctx context.Context, opts ...fencing.SessionOption) error {
	wait := backoffMin
	held := false
	var mismatched time.Time // since when every try met another limit; zero when the last did not
	for {
		got, err := r.permit(ctx, opts)
		held = held || got
		if !errors.Is(err, fencing.ErrLimitMismatch) {
			mismatched = time.Time{}
		} else if mismatched.IsZero() {
			mismatched = time.Now()
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			return nil
		case errors.Is(err, fencing.ErrInvalidArgument):
			return err
		case !mismatched.IsZero() && (!held || time.Since(mismatched) > mismatchGrace*r.cfg.ttl):
			return err
		}
		r.log.Warn("holding a permit failed; trying again", "err", err, "in", wait)
		pause(ctx, wait)
		wait = min(2*wait, backoffMax)
	}
}

// mismatchGrace is how many TTLs a replica that has held a permit keeps
// trying while every try meets another limit.
const mismatchGrace = 3

// permit is one hold: a session of its own (a lost lease ends only this
// hold), a permit, the command, the release. It reports whether it held
// the permit.
func (r *runner) permit(ctx context.Context, opts []fencing.SessionOption) (held bool, _ error) {
	s, err := fencing.NewSession(ctx, r.cli, opts...)
	if err != nil {
		return false, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.TTL())
		defer cancel()
		s.Close(ctx)
	}()
	sem, err := fencing.NewSemaphore(s, r.cfg.name, r.cfg.permits)
	if err != nil {
		return false, err
	}
	h, err := sem.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquire a permit: %w", err)
	}
	// The name's own limit (Semaphore.SetLimit), if it has one, overrides --permits.
	limit, err := sem.ReadLimit(ctx)
	if err != nil {
		limit = r.cfg.permits
	}
	if limit != r.cfg.permits {
		r.log.Info("following the name's own limit, not --permits", "permits", limit, "flag", r.cfg.permits)
	}
	r.limit.Store(int64(limit))
	r.log.Info("holding a permit", "token", h.Token(), "permits", limit)
	// The work ends when the permit is lost or singleton is interrupted.
	wctx, cancel := context.WithCancelCause(h.Context())
	defer cancel(nil)
	defer context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })()
	err = r.work(wctx, h)
	r.log.Info("releasing the permit", "token", h.Token(), "cause", context.Cause(wctx))
	uctx, ucancel := context.WithTimeout(context.Background(), s.TTL())
	defer ucancel()
	if uerr := h.Unlock(uctx); uerr != nil && !errors.Is(uerr, fencing.ErrNotHeld) {
		r.log.Warn("could not release the permit; its lease ends it", "err", uerr)
	}
	return true, err
}

// sameMode refuses to start beside replicas of NAME that run it the other
// way (an election without --permits, a semaphore with it): the two would
// not exclude each other. It reads the other kind's keys once, within
// --dial-timeout; a group has no such mix.
func (r *runner) sameMode(ctx context.Context) error {
	if r.cfg.group != "" {
		return nil
	}
	other, flag := fencing.KindSemaphore, "with --permits"
	if r.cfg.permits > 0 {
		other, flag = fencing.KindElection, "without --permits"
	}
	prefix, err := inspect.KeyPrefix(fencing.DefaultRoot, other, r.cfg.name)
	if err != nil {
		return err
	}
	timeout := r.cfg.conn.DialTimeout
	if timeout <= 0 {
		timeout = connect.DefaultDialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := r.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	switch {
	case err != nil:
		return fmt.Errorf("reading whether other replicas run %q %s: %w", r.cfg.name, flag, err)
	case resp.Count > 0:
		return fmt.Errorf("other replicas run %q %s (%d %s keys): every replica of a name must give the same --permits", r.cfg.name, flag, resp.Count, other)
	}
	return nil
}
