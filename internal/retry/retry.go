// Package retry sends a request to etcd again when it failed for a passing
// reason (no answer in time, a leader change, a dropped proposal, a member
// restarting), and tells such failures from etcd's answers. It is what
// Unlock, Resign, Proclaim and the revision queue's enqueue and wait share;
// guarded txns use only its classification, since they are never resent.
package retry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/admit"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Backoff between attempts that failed with an answer of etcd's: from
// MinBackoff, doubling, up to MaxBackoff.
const (
	MinBackoff = 50 * time.Millisecond
	MaxBackoff = time.Second
)

// AttemptFloor is the least time the first attempt of a retried request
// gets (up to an eighth less when it shares the bound of one that started
// just before: see shared); more when requests are slow (see Timeout). A write that reaches a
// leader as it hands leadership over is dropped without an answer, and etcd
// gives up on it only at its request timeout (7 s by default): a new
// attempt reaches the new leader at once.
const AttemptFloor = 500 * time.Millisecond

// resendFloor is the least time an attempt after the first gets, before
// doubling (see Timeout).
const resendFloor = 50 * time.Millisecond

// attemptCeiling caps the growth of an attempt's time.
const attemptCeiling = 8 * time.Second

// Timeout is how long attempt n (from 0) of a request may wait for its
// answer: four times the usual request time, at least AttemptFloor for the
// first attempt and resendFloor for later ones, doubled for each earlier
// attempt that got no answer (a link slower than the estimate), at most
// attemptCeiling. The estimate learns from every answer, so a client far
// from its cluster is not cut short for long.
//
// The first attempt's floor is not doubled: an attempt that got no answer
// was most likely dropped, as etcd drops a write that a follower forwards to
// a leader just moved, removed or stopped, and the election that follows
// may outlast the first attempt. Later attempts reach the new leader soon
// after it exists (with the floor doubled, two dropped deletes left a lock
// free for 1.5 s: TestHandoffAcrossTwoDroppedDeletes).
func Timeout(lat *Latency, n int) time.Duration {
	d := max(AttemptFloor, 4*lat.Get())
	if n > 0 {
		d = max(resendFloor, 4*lat.Get())
	}
	for range n {
		if d *= 2; d >= attemptCeiling {
			return attemptCeiling
		}
	}
	return min(d, attemptCeiling)
}

// ErrNoAnswer is an attempt that got no answer in its time.
var ErrNoAnswer = errors.New("no answer")

// ErrMalformed is a response that does not have the shape its request asks
// for (a txn's branch without its results): passing, as from a member
// that answered mid-change.
var ErrMalformed = errors.New("malformed response")

// Do runs send until it succeeds, fails for good (an answer, not a passing
// failure: see Transient), ctx ends, or cli is closed, backing off between
// attempts; each attempt is bounded as in Attempt. It sets *unsure when an attempt's
// outcome is unknown (see Unknown). For idempotent writes: Unlock, Resign,
// Proclaim. When ctx ends during a backoff, the error is ctx's, with the
// last attempt's; once cli is closed, it wraps ErrClientClosed (clientv3
// itself retries a closed client's failure until the caller's ctx ends).
func Do(ctx context.Context, cli *clientv3.Client, lat *Latency, unsure *bool, send func(context.Context) error) error {
	if cli.Ctx().Err() != nil {
		return ErrClientClosed
	}
	err := Until(ctx, cli.Ctx(), lat, unsure, send)
	if err != nil && cli.Ctx().Err() != nil {
		return fmt.Errorf("%w (last attempt: %w)", ErrClientClosed, err)
	}
	return err
}

// ErrClientClosed is a request on a closed etcd client.
var ErrClientClosed = errors.New("etcd client closed")

// Until runs send as Do does, until it succeeds, fails for good, ctx ends,
// or life ends (then the error is the last attempt's).
func Until(ctx, life context.Context, lat *Latency, unsure *bool, send func(context.Context) error) error {
	wait, unanswered := MinBackoff, 0
	for {
		err := Attempt(ctx, life, lat, unanswered, send)
		if err == nil {
			return nil
		}
		*unsure = *unsure || Unknown(err)
		if !Transient(err) {
			return err
		}
		if ctx.Err() == nil && life.Err() == nil {
			if errors.Is(err, ErrNoAnswer) {
				unanswered++ // it has waited enough: no backoff
			} else {
				pause(ctx, life, wait)
				wait = min(2*wait, MaxBackoff)
			}
		}
		// Ended while the attempt was out or during the pause: the caller's
		// end is the answer, not the passing failure.
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		}
		if life.Err() != nil {
			return err
		}
	}
}

// Attempt runs send with a ctx cancelled after Timeout(lat, n), or once
// life ends, and feeds the time of an answered attempt to lat. It first
// waits for a place among lat's attempts in flight (Latency.Places); if
// ctx or life ends first, it sends nothing and returns an error wrapping
// admit.ErrNotSent. A first attempt may get up to an eighth less than its
// Timeout: the first attempts of one life that start close together share
// their bound (see shared). An
// attempt cut short by its own time returns an error wrapping ErrNoAnswer.
// Under a ctx that never ends, what send starts on its ctx ends with that
// shared bound, not when send returns: send must leave nothing running.
func Attempt(ctx, life context.Context, lat *Latency, n int, send func(context.Context) error) error {
	// The wait for a place is the client's, not etcd's: it is not part of
	// the attempt's time, nor of the latency estimate.
	places := lat.places()
	if err := places.Enter(ctx, life); err != nil {
		return err
	}
	defer places.Leave()
	start := time.Now()
	actx, d, b := bound(ctx, life, lat, n, start)
	defer b.free()
	err := send(actx)
	switch {
	case err == nil:
		lat.Observe(time.Since(start))
	case ctx.Err() == nil && life.Err() == nil && actx.Err() != nil:
		return fmt.Errorf("%w within %v: %w", ErrNoAnswer, d, err)
	}
	return err
}

// Transient reports whether err is etcd being briefly unable to answer, as
// opposed to an answer (a denied permission, a missing key).
func Transient(err error) bool {
	if dropped(err) || stopping(err) {
		return true
	}
	for _, t := range []error{ErrMalformed, ErrNoAnswer, rpctypes.ErrNoLeader, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrLeaderChanged, rpctypes.ErrTooManyRequests,
		rpctypes.ErrTimeoutWaitAppliedIndex} {
		if errors.Is(err, t) {
			return true
		}
	}
	switch code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// Rejected reports whether etcd refused a request outright (no permission,
// no such lease, no leader, a dropped proposal): then it wrote nothing.
// Only etcd's own answers count: the gRPC client reports some failures
// after the request was applied (a reply too large).
func Rejected(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition,
			codes.ResourceExhausted, codes.OutOfRange, codes.AlreadyExists, codes.Unimplemented:
			return true
		}
	}
	return errors.Is(err, rpctypes.ErrNoLeader) || dropped(err)
}

// Unknown reports whether a write that failed with err may yet have been
// applied: the request may have reached etcd and its reply been lost (a
// timeout, a broken connection, ctx ending in flight). A refusal that etcd
// answered (no leader, a dropped proposal, no permission) applied nothing,
// nor did a request never sent (admit.ErrNotSent).
func Unknown(err error) bool {
	return err != nil && !Rejected(err) && !errors.Is(err, admit.ErrNotSent)
}

// dropped reports a proposal raft refused before appending it (a leader
// handing over, a full proposal queue): etcd passes it on as text.
func dropped(err error) bool { return strings.Contains(err.Error(), "raft proposal dropped") }

// stopping reports raft's "stopped" from a member shutting down: passing,
// but the proposal may have been appended, and committed by the next leader.
func stopping(err error) bool { return strings.Contains(err.Error(), "raft: stopped") }

// code is the gRPC code of err: clientv3 turns etcd's statuses into
// rpctypes.EtcdError values, which carry it.
func code(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	return status.Code(err)
}

// Typed recovers etcd's typed error from a refused watch's, which clientv3
// hands over as plain text ("rpc error: code = PermissionDenied desc =
// etcdserver: permission denied"), so that errors.Is(err,
// rpctypes.ErrPermissionDenied) holds for a watch as for every other call.
func Typed(err error) error {
	if _, desc, ok := strings.Cut(err.Error(), "desc = "); ok {
		if e, ok := rpctypes.Error(errors.New(desc)).(rpctypes.EtcdError); ok {
			return e
		}
	}
	return err
}

// Pause waits d, or until ctx ends.
func Pause(ctx context.Context, d time.Duration) { pause(ctx, ctx, d) }

// pause waits d, or until ctx or life ends.
func pause(ctx, life context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-life.Done():
	}
}

// places returns l's places in flight; nil (no limit) for a nil l.
func (l *Latency) places() *admit.Places {
	if l == nil {
		return nil
	}
	return l.Places
}

// Once sends a request once, outside Attempt (a guarded txn, a cleanup's
// delete, a read), in one of l's places in flight: send runs once a place
// is free, or Once returns an error wrapping admit.ErrNotSent when ctx or
// life (the session's) ends first.
func Once[R any](l *Latency, ctx, life context.Context, send func() (R, error)) (R, error) {
	places := l.places()
	if err := places.Enter(ctx, life); err != nil {
		var none R
		return none, err
	}
	defer places.Leave()
	return send()
}
