package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/retry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errBadResponse reports a txn response without the results its request
// asked for: etcd never sends one, a broken connection could. Whether the
// txn committed is unknown, as after a lost reply.
var errBadResponse = errors.New("malformed txn response")

// ErrNotOwner is returned by Tx.Commit when the owner no longer
// owned its key at commit time. Nothing in the txn was applied.
var ErrNotOwner = errors.New("not owner")

// ErrOutcomeUnknown is returned by Tx.Commit (and Put, Delete) when
// the txn was sent and no answer came back (a timeout, a broken connection,
// ctx ending in flight, a leader lost mid-request): it may or may not have
// been applied, and may yet be. Re-read what it writes before deciding to
// send it again. Every other error of Commit is definite: nothing was
// applied.
var ErrOutcomeUnknown = errors.New("outcome unknown")

// Tx is a txn that commits only while its owner (each of them, for
// TxnAll) still owns its key.
// Build it like a clientv3.Txn: If, Then and Else at most once each, in that
// order, then Commit. Where clientv3 panics on another order, Commit returns
// an error wrapping fencing.ErrInvalidArgument and sends nothing.
type Tx struct {
	ctx    context.Context
	owners []Owner // one for Txn; TxnAll's, in order
	cmps   []clientv3.Cmp
	thens  []clientv3.Op
	elses  []clientv3.Op
	called int   // the last of stepIf, stepThen, stepElse called
	misuse error // the first call out of order, reported by Commit
}

// The steps of a txn, in the order they may be called.
const (
	stepIf = iota + 1
	stepThen
	stepElse
)

var stepNames = [...]string{stepIf: "If", stepThen: "Then", stepElse: "Else"}

// Txn returns a txn guarded by o's ownership.
func Txn(ctx context.Context, o Owner) *Tx { return &Tx{ctx: ctx, owners: []Owner{o}} }

// step records a call of step, or the first one out of order.
func (g *Tx) step(step int) {
	if step <= g.called && g.misuse == nil {
		g.misuse = fmt.Errorf("%w: %s called after %s", fencing.ErrInvalidArgument, stepNames[step], stepNames[g.called])
	}
	g.called = max(g.called, step)
}

// If adds the caller's own compares.
func (g *Tx) If(cs ...clientv3.Cmp) *Tx {
	g.step(stepIf)
	g.cmps = append(g.cmps, cs...)
	return g
}

// Then adds the ops run when the caller's compares hold.
func (g *Tx) Then(ops ...clientv3.Op) *Tx {
	g.step(stepThen)
	g.thens = append(g.thens, ops...)
	return g
}

// Else adds the ops run when a caller's compare fails.
func (g *Tx) Else(ops ...clientv3.Op) *Tx {
	g.step(stepElse)
	g.elses = append(g.elses, ops...)
	return g
}

// Commit sends the txn as one etcd request, once: the caller's writes need
// not be idempotent. It returns the caller's txn response as clientv3 would
// (Succeeded tells whether the caller's compares held). The ownership check
// is linearizable whatever the caller's ops: no lagging member can vouch for
// a lost owner.
//
// If the owner no longer owned its key at commit time, nothing was applied:
// the error wraps ErrNotOwner, and the owner's watched contexts end at once
// with fencing.ErrKeyDeleted. If no answer came back, the error wraps
// ErrOutcomeUnknown: re-read before retrying. Any other error means nothing
// was applied: etcd refused it, or ctx (or the session) ended before it was
// sent, including while it waited for a place among the session's requests
// (fencing.WithMaxInFlight). A nil ctx or owner, an owner not made by this
// library, or If, Then and Else out of order return
// fencing.ErrInvalidArgument. It returns by ctx's deadline.
func (g *Tx) Commit() (*clientv3.TxnResponse, error) {
	links, err := g.check()
	if err == nil {
		err = g.misuse
	}
	if err != nil {
		return nil, fmt.Errorf("guard: txn: %w", err)
	}
	if err := g.ctx.Err(); err != nil {
		return nil, fmt.Errorf("guard: txn for %v: %w", g.tokens(), err) // not sent
	}
	l := links[0]
	txn := l.Client.Txn(g.ctx).If(g.owns()...)
	nested := len(g.cmps) > 0
	if nested {
		// The caller's txn nested in the ownership check: a failed compare
		// of the caller's is told apart from a lost ownership.
		txn = txn.Then(clientv3.OpTxn(g.cmps, g.thens, g.elses))
	}
	// etcd serves a txn of serializable reads alone (or of nothing) from
	// whichever member gets it, without asking the leader: a lagging member
	// would vouch for a lost owner. One linearizable count of the owner key
	// makes it read through the leader; its response is dropped.
	counted := !nested && !slices.ContainsFunc(g.thens, func(op clientv3.Op) bool { return !op.IsGet() || !op.IsSerializable() })
	switch {
	case counted:
		txn = txn.Then(append(slices.Clone(g.thens), clientv3.OpGet(g.owners[0].Key(), clientv3.WithCountOnly()))...)
	case !nested:
		// Without compares of its own, the caller's txn always takes Then:
		// the flat form means the same, for less work.
		txn = txn.Then(g.thens...)
	}
	if len(g.owners) > 1 {
		txn = txn.Else(g.reads()...) // which owner lost its key
	}
	resp, err := retry.Once(l.Latency, g.ctx, l.Life, txn.Commit)
	if err != nil && retry.Unknown(err) {
		return nil, fmt.Errorf("guard: txn for %v: %w: %w", g.tokens(), ErrOutcomeUnknown, err)
	}
	if err != nil {
		return nil, fmt.Errorf("guard: txn for %v: %w", g.tokens(), err)
	}
	if !resp.Succeeded {
		return nil, g.notOwner(links, resp)
	}
	if counted && len(resp.Responses) > 0 {
		resp.Responses = resp.Responses[:len(resp.Responses)-1]
	}
	if !nested {
		return resp, nil
	}
	if len(resp.Responses) != 1 || resp.Responses[0].GetResponseTxn() == nil {
		return nil, fmt.Errorf("guard: txn for %v: %w: %w", g.tokens(), ErrOutcomeUnknown, errBadResponse)
	}
	inner := resp.Responses[0].GetResponseTxn()
	return &clientv3.TxnResponse{Header: resp.Header, Succeeded: inner.Succeeded, Responses: inner.Responses}, nil
}

// Put writes key=val only while o owns its key. It returns ErrNotOwner as
// Commit does.
func Put(ctx context.Context, o Owner, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	resp, err := Txn(ctx, o).Then(clientv3.OpPut(key, val, opts...)).Commit()
	if err != nil {
		return nil, err
	}
	if len(resp.Responses) != 1 {
		return nil, fmt.Errorf("guard: put %q: %w: %w", key, ErrOutcomeUnknown, errBadResponse)
	}
	return (*clientv3.PutResponse)(resp.Responses[0].GetResponsePut()), nil
}

// Delete deletes key only while o owns its key. It returns ErrNotOwner as
// Commit does.
func Delete(ctx context.Context, o Owner, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	resp, err := Txn(ctx, o).Then(clientv3.OpDelete(key, opts...)).Commit()
	if err != nil {
		return nil, err
	}
	if len(resp.Responses) != 1 {
		return nil, fmt.Errorf("guard: delete %q: %w: %w", key, ErrOutcomeUnknown, errBadResponse)
	}
	return (*clientv3.DeleteResponse)(resp.Responses[0].GetResponseDeleteRange()), nil
}
