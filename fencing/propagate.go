package fencing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

type tokenKey struct{}

// WithToken returns a copy of ctx that carries t, for code that writes on
// behalf of an owner without seeing its Hold. A nil ctx is taken as
// context.Background().
func WithToken(ctx context.Context, t Token) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, tokenKey{}, t)
}

// FromContext returns the token WithToken put in ctx, if any (none in a nil
// ctx).
func FromContext(ctx context.Context) (Token, bool) {
	if ctx == nil {
		return Token{}, false
	}
	t, ok := ctx.Value(tokenKey{}).(Token)
	return t, ok
}

// TokenHeader is the HTTP header that carries a token in Token.String form.
const TokenHeader = "Leasehold-Token"

// SetTokenHeader sets TokenHeader on req from the token in req's context and
// reports whether there was one (never for a nil req).
func SetTokenHeader(req *http.Request) bool {
	if req == nil {
		return false
	}
	t, ok := FromContext(req.Context())
	if ok {
		req.Header.Set(TokenHeader, t.String())
	}
	return ok
}

// MiddlewareOption configures Gate.Middleware. A nil MiddlewareOption is
// ignored.
type MiddlewareOption func(*middleware)

// AllowMissingToken lets requests without TokenHeader through, unchecked.
// Unset: they get 400 Bad Request.
func AllowMissingToken() MiddlewareOption { return func(m *middleware) { m.allowMissing = true } }

// AllowNames admits only tokens of the names allow accepts; any other
// gets 403 Forbidden and leaves no mark. The names come from the requests:
// behind clients that may send any name, it keeps a Gate's marks (one per
// name ever admitted) to the names the store behind it serves. A nil allow
// accepts every name, as without the option.
func AllowNames(allow func(name string) bool) MiddlewareOption {
	return func(m *middleware) { m.allow = allow }
}

type middleware struct {
	g            *Gate
	next         http.Handler
	allowMissing bool
	allow        func(name string) bool
}

// Middleware admits the token of each request through g before next runs,
// and runs next under g.Do, so no newer token is admitted while it writes.
// A stale token gets 409 Conflict, a malformed one 400 Bad Request, as does a
// missing one unless AllowMissingToken is set; a name AllowNames refuses gets
// 403 Forbidden, and a Store that fails 503 Service Unavailable. next finds
// the admitted token with FromContext. With a nil next (or a nil g), every
// request gets 500 Internal Server Error naming ErrInvalidArgument.
func (g *Gate) Middleware(next http.Handler, opts ...MiddlewareOption) http.Handler {
	m := &middleware{g: g, next: next}
	for _, o := range opts {
		if o != nil {
			o(m)
		}
	}
	return m
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.g == nil || m.next == nil {
		http.Error(w, fmt.Sprintf("fencing: Middleware: %v: nil gate or handler", ErrInvalidArgument), http.StatusInternalServerError)
		return
	}
	text := r.Header.Get(TokenHeader)
	if text == "" {
		if m.allowMissing {
			m.next.ServeHTTP(w, r)
			return
		}
		http.Error(w, "missing "+TokenHeader+" header", http.StatusBadRequest)
		return
	}
	t, err := ParseToken(text)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if m.allow != nil && !m.allow(t.Name) {
		http.Error(w, fmt.Sprintf("fencing token of name %q not served here", t.Name), http.StatusForbidden)
		return
	}
	err = m.g.Do(r.Context(), t, func(context.Context) error {
		m.next.ServeHTTP(w, r.WithContext(WithToken(r.Context(), t)))
		return nil
	})
	switch {
	case errors.Is(err, ErrStaleToken):
		http.Error(w, fmt.Sprintf("stale fencing token: %v", err), http.StatusConflict)
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
}
