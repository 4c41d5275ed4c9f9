package guard

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/sessionlink"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TxnAll returns a txn guarded by the ownership of every owner at once (the
// holds of a fencing.MultiHold, say): Commit applies it only while each
// still owns its key, at the txn's revision, and is otherwise Txn's
// Commit. If any owner had lost its key, nothing was applied: the error
// wraps ErrNotOwner and names the owners that lost, whose watched contexts
// end at once with fencing.ErrKeyDeleted; the others' go on. Owners may
// belong to several sessions, all on one etcd client: owners on two
// clients, or none, return fencing.ErrInvalidArgument. The txn's compares
// count against etcd's --max-txn-ops, one per owner.
func TxnAll(ctx context.Context, owners ...Owner) *Tx {
	return &Tx{ctx: ctx, owners: append([]Owner(nil), owners...)}
}

// check returns the link of each owner's session, all on one client.
func (g *Tx) check() ([]*sessionlink.Link, error) {
	if len(g.owners) == 0 {
		return nil, fmt.Errorf("%w: no owner", fencing.ErrInvalidArgument)
	}
	links := make([]*sessionlink.Link, len(g.owners))
	for i, o := range g.owners {
		l, err := check(g.ctx, o)
		if err != nil {
			return nil, err
		}
		if i > 0 && l.Client != links[0].Client {
			return nil, fmt.Errorf("%w: owners %v and %v on two etcd clients: one txn goes through one", fencing.ErrInvalidArgument,
				g.owners[0].Token(), o.Token())
		}
		links[i] = l
	}
	return links, nil
}

// owns is the ownership compare of each owner.
func (g *Tx) owns() []clientv3.Cmp {
	cmps := make([]clientv3.Cmp, len(g.owners))
	for i, o := range g.owners {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(o.Key()), "=", o.Token().Revision)
	}
	return cmps
}

// reads reads each owner's key, to tell which lost it when a compare fails.
func (g *Tx) reads() []clientv3.Op {
	ops := make([]clientv3.Op, len(g.owners))
	for i, o := range g.owners {
		ops[i] = clientv3.OpGet(o.Key(), clientv3.WithKeysOnly())
	}
	return ops
}

// tokens names the txn's owners in errors: one token, or the list.
func (g *Tx) tokens() any {
	if len(g.owners) == 1 {
		return g.owners[0].Token()
	}
	ts := make([]fencing.Token, len(g.owners))
	for i, o := range g.owners {
		ts[i] = o.Token()
	}
	return ts
}

// notOwner is the ErrNotOwner of a txn, resp, whose ownership compares
// failed. It ends the watches of each owner found gone (with several
// owners, those whose key resp's reads found missing or of another life)
// and reports the refusal on its session.
func (g *Tx) notOwner(links []*sessionlink.Link, resp *clientv3.TxnResponse) error {
	rev := resp.Header.Revision
	lost := []int{0}
	if len(g.owners) > 1 {
		lost = lost[:0]
		for i, o := range g.owners {
			if i >= len(resp.Responses) {
				break // a malformed reply: the rest unknown, their watches tell
			}
			kvs := resp.Responses[i].GetResponseRange().GetKvs()
			if len(kvs) == 0 || kvs[0].CreateRevision != o.Token().Revision {
				lost = append(lost, i)
			}
		}
	}
	var err error
	if len(g.owners) == 1 {
		err = fmt.Errorf("guard: txn for %v at revision %d: %w", g.tokens(), rev, ErrNotOwner)
	} else {
		gone := make([]fencing.Token, len(lost))
		for j, i := range lost {
			gone[j] = g.owners[i].Token()
		}
		err = fmt.Errorf("guard: txn for %v at revision %d: %w: %v lost", g.tokens(), rev, ErrNotOwner, gone)
	}
	for _, i := range lost {
		o, l := g.owners[i], links[i]
		l.Owners.Lost(o.Key(), o.Token().Revision, fmt.Errorf("%w: guarded txn failed its ownership compare at revision %d",
			fencing.ErrKeyDeleted, rev))
		l.Reject(o.Token().Name, o.Token().Revision, err)
	}
	return err
}
