package gate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/gate"
)

// This example fences a store that knows nothing of etcd: the Gate refuses
// the write of an owner whose successor has already written.
func ExampleGate() {
	var g gate.Gate
	old := fencing.Token{Name: "ledger", Revision: 41}
	successor := fencing.Token{Name: "ledger", Revision: 57}

	fmt.Println(g.Admit(context.Background(), old))
	fmt.Println(g.Admit(context.Background(), successor))
	err := g.Admit(context.Background(), old) // the old owner wakes from a long pause and writes
	fmt.Println(errors.Is(err, fencing.ErrStaleToken))
	// Output:
	// <nil>
	// <nil>
	// true
}

// This example runs each write under the Gate, so no newer token is
// admitted between the check and the write: a stale write never runs.
func ExampleGate_Do() {
	var g gate.Gate
	ctx := context.Background()
	balance := 0
	for _, rev := range []int64{3, 8, 5} { // 5 comes from an owner already replaced
		err := g.Do(ctx, fencing.Token{Name: "ledger", Revision: rev}, func(context.Context) error {
			balance += 10
			return nil
		})
		fmt.Println(rev, errors.Is(err, fencing.ErrStaleToken))
	}
	fmt.Println("balance", balance)
	// Output:
	// 3 false
	// 8 false
	// 5 true
	// balance 20
}

// This example carries a token over HTTP: the client puts it in its
// request's context and SetHeader copies it into the Leasehold-Token header;
// the server's Middleware admits it and refuses an older one with 409.
func ExampleGate_Middleware() {
	var g gate.Gate
	srv := httptest.NewServer(g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, _ := gate.FromContext(r.Context())
		fmt.Fprint(w, "wrote as ", t)
	})))
	defer srv.Close()

	for _, rev := range []int64{7, 6} {
		ctx := gate.WithToken(context.Background(), fencing.Token{Name: "ledger", Revision: rev})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil) // error checks trimmed
		gate.SetHeader(req)
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text, _, _ := strings.Cut(string(body), ":") // drop the detail of a refusal
		fmt.Println(resp.StatusCode, text)
	}
	// Output:
	// 200 wrote as ledger@7
	// 409 stale fencing token
}
