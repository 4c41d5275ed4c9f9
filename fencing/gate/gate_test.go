package gate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/gate"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

func tok(rev int64) fencing.Token { return fencing.Token{Name: "ledger", Revision: rev} }

func TestGateAdmitsNewerAndEqualRefusesOlder(t *testing.T) {
	var g gate.Gate
	for _, tc := range []struct {
		t    fencing.Token
		want error
	}{
		{tok(5), nil},
		{tok(5), nil}, // a retry
		{tok(7), nil},
		{tok(6), fencing.ErrStaleToken},
		{fencing.Token{Name: "other", Revision: 1}, nil}, // names are independent
		{fencing.Token{Name: "", Revision: 9}, fencing.ErrInvalidToken},
		{fencing.Token{Name: "ledger", Revision: 0}, fencing.ErrInvalidToken},
	} {
		if err := g.Admit(context.Background(), tc.t); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("Admit(%v) = %v; want %v", tc.t, err, tc.want)
		}
	}
}

// Concurrent admissions never leave a lower mark than the highest admitted.
func TestGateConcurrentAdmits(t *testing.T) {
	var g gate.Gate
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() { g.Admit(context.Background(), tok(int64(i+1))) })
	}
	wg.Wait()
	if err := g.Admit(context.Background(), tok(99)); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("Admit(99) after 100: %v; want ErrStaleToken", err)
	}
}

// Do orders the write with the check: a stale write never runs.
func TestGateDoRunsOnlyAdmittedWrites(t *testing.T) {
	var g gate.Gate
	var written []int64
	for _, rev := range []int64{3, 8, 5, 8, 9} {
		g.Do(context.Background(), tok(rev), func(context.Context) error { written = append(written, rev); return nil })
	}
	if fmt.Sprint(written) != "[3 8 8 9]" {
		t.Fatalf("writes = %v; want [3 8 8 9]", written)
	}
}

// Do hands write the caller's ctx, for a write to a remote store that must
// end with it.
func TestGateDoPassesContext(t *testing.T) {
	var g gate.Gate
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "mine"))
	cancel()
	err := g.Do(ctx, tok(1), func(wctx context.Context) error {
		if wctx.Value(key{}) != "mine" {
			t.Errorf("write's ctx lacks the caller's value")
		}
		return wctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v; want the write's error (its ctx ended)", err)
	}
}

// Marks kept in etcd survive the gate and are shared by gates.
func TestEtcdStore(t *testing.T) {
	c := fencingtest.Single(t)
	store := &gate.EtcdStore{Client: c.Client(t), Prefix: "leasehold/gate/test/"}
	a := gate.Gate{Store: store}
	if err := a.Admit(t.Context(), tok(10)); err != nil {
		t.Fatal(err)
	}
	b := gate.Gate{Store: &gate.EtcdStore{Client: c.Client(t), Prefix: "leasehold/gate/test/"}}
	if err := b.Admit(t.Context(), tok(9)); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("second gate admitted 9 after 10: %v", err)
	}
	if err := b.Admit(t.Context(), tok(10)); err != nil {
		t.Fatalf("retry of 10: %v", err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { a.Admit(t.Context(), tok(int64(11+i))) })
	}
	wg.Wait()
	if err := b.Admit(t.Context(), tok(29)); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("Admit(29) after concurrent 11..30: %v; want ErrStaleToken", err)
	}
}

func TestTokenContext(t *testing.T) {
	if _, ok := gate.FromContext(context.Background()); ok {
		t.Fatal("token in an empty context")
	}
	ctx := gate.WithToken(context.Background(), tok(4))
	if got, ok := gate.FromContext(ctx); !ok || got != tok(4) {
		t.Fatalf("FromContext = %v, %v", got, ok)
	}
}

// ledger is a handler that records the token of each write it accepts.
func ledger(t *testing.T, g *gate.Gate, opts ...gate.MiddlewareOption) (*httptest.Server, *[]fencing.Token) {
	var got []fencing.Token
	srv := httptest.NewServer(g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tk, _ := gate.FromContext(r.Context())
		got = append(got, tk)
	}), opts...))
	t.Cleanup(srv.Close)
	return srv, &got
}

func post(t *testing.T, srv *httptest.Server, ctx context.Context, header string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
	if !gate.SetHeader(req) && header != "" {
		req.Header.Set(gate.Header, header)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestMiddleware(t *testing.T) {
	var g gate.Gate
	srv, got := ledger(t, &g)
	bg := context.Background()
	for _, tc := range []struct {
		ctx    context.Context
		header string
		want   int
	}{
		{gate.WithToken(bg, tok(5)), "", http.StatusOK},
		{gate.WithToken(bg, tok(7)), "", http.StatusOK},
		{gate.WithToken(bg, tok(6)), "", http.StatusConflict},
		{bg, "", http.StatusBadRequest},
		{bg, "ledger@x", http.StatusBadRequest},
		{bg, "ledger@7", http.StatusOK},
	} {
		if code, body := post(t, srv, tc.ctx, tc.header); code != tc.want {
			t.Errorf("POST (%v, %q) = %d %q; want %d", tc.ctx, tc.header, code, body, tc.want)
		}
	}
	if fmt.Sprint(*got) != "[ledger@5 ledger@7 ledger@7]" {
		t.Fatalf("writes = %v", *got)
	}
	open, _ := ledger(t, &g, gate.AllowMissingToken())
	if code, _ := post(t, open, bg, ""); code != http.StatusOK {
		t.Fatalf("POST without token, AllowMissingToken: %d; want 200", code)
	}
	// Names from requests: only those the store serves get a mark.
	only, _ := ledger(t, &g, gate.AllowNames(func(name string) bool { return name == "ledger" }))
	if code, _ := post(t, only, bg, "other@3"); code != http.StatusForbidden {
		t.Fatalf("POST of another name, AllowNames: %d; want 403", code)
	}
	if code, _ := post(t, only, bg, "ledger@7"); code != http.StatusOK {
		t.Fatalf("POST of the name allowed: %d; want 200", code)
	}
	if err := g.Admit(bg, fencing.Token{Name: "other", Revision: 1}); err != nil {
		t.Fatalf("the refused name left a mark: %v", err)
	}
}

// Any header value gets 200, 400 or 409, never a panic.
func FuzzMiddlewareHeader(f *testing.F) {
	for _, s := range []string{"ledger@1", "ledger@0", "", "@", "a%zz@1", "ledger@99999999999999999999"} {
		f.Add(s)
	}
	var g gate.Gate
	h := g.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	f.Fuzz(func(t *testing.T, header string) {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header[gate.Header] = []string{header}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusConflict:
		default:
			t.Fatalf("header %q: status %d", header, rec.Code)
		}
	})
}

// An etcd-backed gate that cannot reach etcd refuses to admit, with the
// client's error rather than ErrStaleToken.
func TestEtcdStoreUnreachable(t *testing.T) {
	c := fencingtest.Single(t)
	cli := fencingtest.NewClient(t, c.Endpoints())
	cli.Close()
	g := gate.Gate{Store: &gate.EtcdStore{Client: cli, Prefix: "leasehold/gate/closed/"}}
	err := g.Admit(t.Context(), tok(1))
	if err == nil || errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("Admit through a closed client: %v; want the client's error", err)
	}
}

// Do serialises the writes of one name, and keeps nothing per name once
// they return: 2000 names through one Gate, 8 calls at a time on each,
// leave no lock behind.
func TestGateDoKeepsNoLockPerName(t *testing.T) {
	var g gate.Gate
	var wg sync.WaitGroup
	var inside [2000]atomic.Int32 // writes of each name running now
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				tk := fencing.Token{Name: fmt.Sprint("n", i), Revision: int64(1 + w)}
				g.Do(context.Background(), tk, func(context.Context) error {
					if inside[i].Add(1) != 1 {
						t.Error("two writes of one name at once")
					}
					inside[i].Add(-1)
					return nil
				})
			}
		})
	}
	wg.Wait()
	if n := gate.Names(&g); n != 0 {
		t.Fatalf("the Gate keeps a lock for %d names after every Do returned", n)
	}
}

// A Gate reports each stale token it refuses, and nothing else.
func TestGateReportsRejections(t *testing.T) {
	var rec etcdtest.Recorder
	g := gate.Gate{OnReject: rec.Observer().OnReject}
	for _, rev := range []int64{5, 5, 7, 6} {
		g.Admit(context.Background(), fencing.Token{Name: "n", Revision: rev})
	}
	g.Admit(context.Background(), fencing.Token{}) // invalid, not stale
	rec.Snapshot(func(r *etcdtest.Recorder) {
		if len(r.Rejected) != 1 || r.Rejected[0].Token.Revision != 6 || !errors.Is(r.Rejected[0].Cause, fencing.ErrStaleToken) {
			t.Fatalf("rejections %+v; want one, of revision 6, ErrStaleToken", r.Rejected)
		}
	})
}

// OnReject runs with no lock of the Gate held: it may call Do of the same
// name, under Admit and under Do.
func TestOnRejectRunsOutsideLocks(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int64
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var g gate.Gate
		g.OnReject = func(e fencing.RejectEvent) { // Do of the same name waits for Do's lock
			calls.Add(1)
			_ = g.Do(ctx, fencing.Token{Name: e.Token.Name, Revision: 10}, func(context.Context) error { return nil })
		}
		_ = g.Admit(ctx, fencing.Token{Name: "reentrant", Revision: 9})
		_ = g.Do(ctx, fencing.Token{Name: "reentrant", Revision: 8}, func(context.Context) error { return nil }) // OnReject under Do
	}()
	select {
	case <-finished:
	case <-time.After(fencingtest.Wait):
		t.Fatal("an OnReject that calls back into the Gate deadlocked")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("OnReject called %d times; want 1 (revision 8)", n)
	}
}
