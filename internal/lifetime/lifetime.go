// Package lifetime makes contexts that end otherwise than their parent: a
// cleanup that outlives its call by a grace period (Detach), a request that
// goes on while a session lives (Outlive), and one already over (Ended).
package lifetime

import (
	"context"
	"time"
)

// Detach returns a context for the last requests of a call whose ctx may end
// (or has ended) first: it keeps ctx's values, and ends grace after ctx
// does, or limit from now (if limit > 0), whichever comes first. A call that
// cleans up with it returns at most grace after its deadline.
func Detach(ctx context.Context, grace, limit time.Duration) (context.Context, context.CancelFunc) {
	var dctx context.Context
	var cancel context.CancelFunc
	if limit > 0 {
		dctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), limit)
	} else {
		dctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	// A timer that fires after cancel is harmless: cancel is idempotent.
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return dctx, func() { stop(); cancel() }
}

// Outlive returns a context with ctx's values and deadline but not its
// cancellation, which ends when life does: for a request that must go on
// after the call's own ctx was ended on purpose.
func Outlive(ctx, life context.Context) (context.Context, context.CancelFunc) {
	var cancel context.CancelFunc
	if d, ok := ctx.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), d)
	} else {
		ctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	stop := context.AfterFunc(life, cancel)
	return ctx, func() { stop(); cancel() }
}

// Ended returns a context that is already done, with cause: what an owner's
// Context returns once it can no longer prove anything.
func Ended(cause error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx
}
