package gate_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/gate"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// Every exported function and method given a nil or zero value returns
// fencing.ErrInvalidArgument (or does its documented no-op), never panics.
func TestNilAndZeroInputs(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	invalid := map[string]func() error{
		"Gate.Do(nil write)": func() error {
			var g gate.Gate
			return g.Do(ctx, fencing.Token{Name: "x", Revision: 1}, nil)
		},
		"Gate.Admit(nil ctx)": func() error {
			var g gate.Gate
			return g.Admit(nilCtx, fencing.Token{Name: "x", Revision: 1})
		},
		"Gate with a zero EtcdStore": func() error {
			g := gate.Gate{Store: new(gate.EtcdStore)}
			return g.Admit(ctx, fencing.Token{Name: "x", Revision: 1})
		},
	}
	for name, call := range invalid {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, fencing.ErrInvalidArgument) {
				t.Errorf("got %v, want ErrInvalidArgument", err)
			}
			etcdtest.NamesPackageOnce(t, "gate", err)
		})
	}

	t.Run("documented no-ops", func(t *testing.T) {
		if _, ok := gate.FromContext(nilCtx); ok {
			t.Error("FromContext(nil) found a token")
		}
		if tok, ok := gate.FromContext(gate.WithToken(nilCtx, fencing.Token{Name: "x", Revision: 1})); !ok || tok.Revision != 1 {
			t.Error("WithToken(nil) lost the token")
		}
		if gate.SetHeader(nil) {
			t.Error("SetHeader(nil) reported a token")
		}
		var g gate.Gate
		ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
		for name, hd := range map[string]http.Handler{
			"nil option": g.Middleware(ok, nil, gate.AllowMissingToken()),
			"nil next":   g.Middleware(nil),
		} {
			rec := httptest.NewRecorder()
			hd.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			want := http.StatusOK
			if name == "nil next" {
				want = http.StatusInternalServerError
			}
			if rec.Code != want {
				t.Errorf("Middleware with a %s: status %d, want %d", name, rec.Code, want)
			}
		}
	})
}

// Every error the Gate returns names the package once, first, whatever it
// wraps: "gate: admit \"g\"@1: stale token: ...".
func TestErrorsNamePackageOnce(t *testing.T) {
	var g gate.Gate
	g.Admit(context.Background(), fencing.Token{Name: "g", Revision: 2})
	errs := map[string]func() error{
		"Gate.Admit(context.Background(), stale)": func() error { return g.Admit(context.Background(), fencing.Token{Name: "g", Revision: 1}) },
		"Gate.Admit(context.Background(), token)": func() error { return g.Admit(context.Background(), fencing.Token{Name: "", Revision: 1}) },
	}
	for name, call := range errs {
		t.Run(name, func(t *testing.T) { etcdtest.NamesPackageOnce(t, "gate", call()) })
	}
}
