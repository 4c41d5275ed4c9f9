package gate

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/leasehold/leasehold/fencing"
)

// MiddlewareOption configures Gate.Middleware. A nil MiddlewareOption is
// ignored.
type MiddlewareOption func(*middleware)

// AllowMissingToken lets requests without Header through, unchecked.
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
// request gets 500 Internal Server Error naming fencing.ErrInvalidArgument.
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
		http.Error(w, fmt.Sprintf("gate: Middleware: %v: nil gate or handler", fencing.ErrInvalidArgument), http.StatusInternalServerError)
		return
	}
	text := r.Header.Get(Header)
	if text == "" {
		if m.allowMissing {
			m.next.ServeHTTP(w, r)
			return
		}
		http.Error(w, "missing "+Header+" header", http.StatusBadRequest)
		return
	}
	t, err := fencing.ParseToken(text)
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
	case errors.Is(err, fencing.ErrStaleToken):
		http.Error(w, fmt.Sprintf("stale fencing token: %v", err), http.StatusConflict)
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
}
