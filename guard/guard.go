package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/lifetime"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/sessionlink"
)

// Owner is one ownership of one etcd key, proven by the key's create
// revision (the token's Revision). *fencing.Hold and *election.Term
// implement it.
type Owner interface {
	Token() fencing.Token
	Key() string
	Session() *fencing.Session
}

// Watch returns a context that ends as soon as o can no longer prove
// ownership. context.Cause names the first loss, and later ones never
// replace it: fencing.ErrKeyDeleted (key deleted or replaced; also wrapping
// fencing.ErrLeaseExpired when it went with its lease), the session's Err
// (fencing.ErrLeaseExpired, fencing.ErrLeaseUnconfirmed, fencing.ErrSessionClosed),
// or ctx's own cause.
//
// Watch returns once its watch is established on the server, so a deletion
// after it returns is seen within one watch round trip; if ownership is
// already lost, the context is already done. A compacted or broken watch is
// resumed from a fresh read and never ends a valid hold. The watches of one
// session share one stream.
//
// The returned CancelFunc ends the watch and returns once it has ended; call
// it when the work is done.
func Watch(ctx context.Context, o Owner) (context.Context, context.CancelFunc) {
	l, err := check(ctx, o)
	if err != nil {
		return lifetime.Ended(fmt.Errorf("guard: Watch: %w", err)), func() {}
	}
	return ownwatch.Watch(ctx, l.Owner(o.Key(), o.Token().Revision))
}

// Do runs f under a context watched for o's ownership (see Watch) and returns
// f's error. If f returns an error after ownership was lost, Do returns the
// loss cause joined to it, so errors.Is finds both.
func Do(ctx context.Context, o Owner, f func(ctx context.Context) error) error {
	if _, err := check(ctx, o); err != nil {
		return fmt.Errorf("guard: Do: %w", err)
	}
	if f == nil {
		return fmt.Errorf("guard: Do: %w: nil function", fencing.ErrInvalidArgument)
	}
	wctx, cancel := Watch(ctx, o)
	defer cancel()
	err := f(wctx)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		if cause := context.Cause(wctx); cause != err {
			return errors.Join(err, cause)
		}
	}
	return err
}

// check returns what guard needs of o's session, or ErrInvalidArgument for
// a nil ctx, a nil o, or an o without a session made by NewSession.
func check(ctx context.Context, o Owner) (*sessionlink.Link, error) {
	switch {
	case ctx == nil:
		return nil, fmt.Errorf("%w: nil context", fencing.ErrInvalidArgument)
	case o == nil:
		return nil, fmt.Errorf("%w: nil owner", fencing.ErrInvalidArgument)
	}
	if s := o.Session(); s != nil {
		if l := sessionlink.Of(s); l != nil {
			return l, nil
		}
	}
	return nil, fmt.Errorf("%w: owner without a session made by NewSession", fencing.ErrInvalidArgument)
}
