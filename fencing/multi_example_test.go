package fencing_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/fencing"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This example locks two accounts together, all or nothing, and moves money
// between them in a txn that commits only while both locks are held.
func ExampleMultiMutex() {
	ctx := context.Background()
	s, err := fencing.NewSession(ctx, exampleClient())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	m, err := fencing.NewMultiMutex(s, "accounts/bob", "accounts/alice") // any order
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := m.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	toks := h.Tokens() // in the order of the names, all at one revision
	fmt.Println(toks[0].Name, toks[1].Name, toks[0].Revision == toks[1].Revision)

	resp, err := s.Client().Txn(ctx).If(h.IsOwner()...).
		Then(clientv3.OpPut("balances/alice", "90"), clientv3.OpPut("balances/bob", "110")).Commit()
	fmt.Println(resp.Succeeded, err)

	// A Mutex on either name is the same lock.
	alice, _ := fencing.NewMutex(s, "accounts/alice")
	_, err = alice.TryLock(ctx)
	fmt.Println(errors.Is(err, fencing.ErrLocked))
	fmt.Println(h.Unlock(ctx))
	// Output:
	// accounts/bob accounts/alice true
	// true <nil>
	// true
	// <nil>
}
