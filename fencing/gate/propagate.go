package gate

import (
	"context"
	"net/http"

	"github.com/leasehold/leasehold/fencing"
)

type tokenKey struct{}

// WithToken returns a copy of ctx that carries t, for code that writes on
// behalf of an owner without seeing its Hold. A nil ctx is taken as
// context.Background().
func WithToken(ctx context.Context, t fencing.Token) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, tokenKey{}, t)
}

// FromContext returns the token WithToken put in ctx, if any (none in a nil
// ctx).
func FromContext(ctx context.Context) (fencing.Token, bool) {
	if ctx == nil {
		return fencing.Token{}, false
	}
	t, ok := ctx.Value(tokenKey{}).(fencing.Token)
	return t, ok
}

// Header is the HTTP header that carries a token in Token.String form.
const Header = "Leasehold-Token"

// SetHeader sets Header on req from the token in req's context and reports
// whether there was one (never for a nil req).
func SetHeader(req *http.Request) bool {
	if req == nil {
		return false
	}
	t, ok := FromContext(req.Context())
	if ok {
		req.Header.Set(Header, t.String())
	}
	return ok
}
