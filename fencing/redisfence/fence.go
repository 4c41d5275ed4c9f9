package redisfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/fencing"
)

// ErrCrossSlot is returned by Do for an Op whose key is in another Redis
// Cluster hash slot than the fence's mark: a script cannot touch it
// atomically in a cluster, so it is refused everywhere, before anything is
// sent. Give the key the hash tag of the fence's name ("{orders}:total" for
// name "orders").
var ErrCrossSlot = errors.New("key in another hash slot than the fence's mark")

// Client sends one command to Redis and returns its reply: an int64, a
// string ([]byte is taken too), nil, or a []any of those; a Redis error
// reply as an error whose text starts with Redis's code (NOSCRIPT). It
// must send a command once: a client that resends after a lost reply
// (go-redis unless MaxRetries is -1) can apply a Do twice, or report
// ErrStaleToken for a Do that wrote. On a cluster it must route EVALSHA by
// its first key. go-redis and rueidis satisfy it in a few lines (see the
// examples).
type Client interface {
	Do(ctx context.Context, args ...string) (any, error)
}

// markPrefix starts every mark's key: the mark of name is
// "leasehold:fence:{name}". Ops may not touch such keys.
const markPrefix = "leasehold:fence:"

// maxOpArgs bounds one Op's keys and arguments together.
const maxOpArgs = 7000

// Fence fences writes into one Redis (a primary, or a cluster) with
// leasehold's tokens. It keeps no state of its own, so any number of Fences
// in any number of processes may share a server; it is safe for concurrent
// use.
type Fence struct {
	c     Client
	name  string // fence every token under this name, if named
	named bool
}

// Option configures New. A nil Option is ignored.
type Option func(*Fence)

// WithName fences every token under name instead of its own name, as
// sqlfence.WithName: for a resource whose writers hold a lock of another
// name. Every writer of the resource must then use the same name.
func WithName(name string) Option { return func(f *Fence) { f.name, f.named = name, true } }

// New returns a fence that sends its scripts through c. It sends nothing
// itself. It returns fencing.ErrInvalidArgument for a nil c, and
// fencing.ErrInvalidName for a WithName that fencing.ValidateName refuses
// or that holds '{' or '}', which would change the mark's hash tag.
func New(c Client, opts ...Option) (*Fence, error) {
	f := &Fence{c: c}
	for _, o := range opts {
		if o != nil {
			o(f)
		}
	}
	if c == nil {
		return nil, fmt.Errorf("redisfence: New: %w: nil client", fencing.ErrInvalidArgument)
	}
	if f.named {
		if err := validName(f.name); err != nil {
			return nil, fmt.Errorf("redisfence: New: %w", err)
		}
	}
	return f, nil
}

// Do applies ops fenced by t, in one script: it compares t with the mark of
// t's name, raises the mark to t and applies ops in order, atomically, and
// returns one result per op. Of two Dos under one name with tokens t1 < t2,
// t1's never applies after t2's; the same token passes again (a retry), and
// Do with no op only raises the mark.
//
// A token older than the mark returns fencing.ErrStaleToken, and one of
// another etcd cluster fencing.ErrClusterMismatch: nothing is written. Bad
// input (an invalid token, an Op Redis would refuse, a key outside the
// mark's slot: ErrCrossSlot) returns a sentinel and sends nothing. An
// error Redis raises in an op ends the script there, with no rollback:
// what ran before it stays, the raise included. A client's error (a
// timeout, a lost connection) leaves the outcome unknown.
func (f *Fence) Do(ctx context.Context, t fencing.Token, ops ...Op) ([]any, error) {
	if err := f.check(ctx, t); err != nil {
		return nil, fmt.Errorf("redisfence: Do %v: %w", t, err)
	}
	key := markKey(f.nameOf(t))
	args, err := encode(key, t, ops)
	if err != nil {
		return nil, fmt.Errorf("redisfence: Do %v: %w", t, err)
	}
	reply, err := f.eval(ctx, scriptFor(ops), args)
	if err != nil {
		return nil, fmt.Errorf("redisfence: Do %v: %w", t, err)
	}
	res, err := verdict(reply, key, t, len(ops))
	if err != nil {
		return nil, fmt.Errorf("redisfence: Do %v: %w", t, err)
	}
	return res, nil
}

// encode makes EVALSHA's arguments after the script's name: the key count,
// the mark's key and every op's keys, the token, and every op.
func encode(mark string, t fencing.Token, ops []Op) ([]string, error) {
	keys := []string{mark}
	argv := []string{strconv.FormatUint(t.Cluster, 16), strconv.FormatInt(t.Revision, 10)}
	want, raw := slot(mark), 0
	for i, op := range ops {
		if len(op.keys)+len(op.args) > maxOpArgs {
			// Lua 5.1 unpacks at most 8000 values: Redis would fail the op
			// mid-script, after the raise.
			return nil, fmt.Errorf("%w: op %d has %d keys and arguments, more than %d", fencing.ErrInvalidArgument, i, len(op.keys)+len(op.args), maxOpArgs)
		}
		switch {
		case op.cmd == "" && op.body == "":
			return nil, fmt.Errorf("%w: op %d is the zero Op", fencing.ErrInvalidArgument, i)
		case op.bad != "":
			return nil, fmt.Errorf("%w: op %d: %s", fencing.ErrInvalidArgument, i, op.bad)
		}
		for _, k := range op.keys {
			if k == "" || strings.HasPrefix(k, markPrefix) {
				return nil, fmt.Errorf("%w: op %d has an empty key or a fence's mark, %q", fencing.ErrInvalidArgument, i, k)
			}
			if slot(k) != want {
				return nil, fmt.Errorf("%w: key %q of op %d is in slot %d, mark %q in slot %d", ErrCrossSlot, k, i, slot(k), mark, want)
			}
		}
		cmd := op.cmd
		if op.body != "" {
			raw++
			cmd = "#" + itoa(raw)
		}
		keys = append(keys, op.keys...)
		argv = append(argv, cmd, itoa(len(op.keys)), itoa(len(op.args)))
		argv = append(argv, op.args...)
	}
	return append(append([]string{itoa(len(keys))}, keys...), argv...), nil
}

// eval runs s by its SHA1, and by its body when the server does not have
// it yet (a new server, a restart, SCRIPT FLUSH), which also loads it.
func (f *Fence) eval(ctx context.Context, s script, args []string) (any, error) {
	reply, err := f.c.Do(ctx, append([]string{"EVALSHA", s.sha}, args...)...)
	// Redis's own text, and not any error a raw script raises with NOSCRIPT
	// in it: that one ran, and must not run again.
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT No matching script") {
		reply, err = f.c.Do(ctx, append([]string{"EVAL", s.body}, args...)...)
	}
	return reply, err
}

// verdict reads the script's reply: the results, or why it refused.
func verdict(reply any, key string, t fencing.Token, ops int) ([]any, error) {
	r, _ := reply.([]any)
	status, mark := text(get(r, 0)), text(get(r, 1))
	well := strings.Count(mark, " ") == 1
	switch {
	case status == "ok" && len(r) == ops+1:
		return r[1:], nil
	case status == "bad":
		return nil, fmt.Errorf("mark %q holds %q, not a mark the fence wrote; nothing written", key, mark)
	case status == "stale" && well:
		return nil, fmt.Errorf("%w: mark %q is at %s", fencing.ErrStaleToken, key, mark)
	case status == "cluster" && well:
		return nil, fmt.Errorf("%w: mark %q holds tokens of etcd cluster %s, this one is of cluster %x; "+
			"if etcd was rebuilt or restored, restore with 'etcdutl snapshot restore --bump-revision', "+
			"or, once no holder of the old cluster can write, adopt the new one with Reset",
			fencing.ErrClusterMismatch, key, strings.Fields(mark)[0], t.Cluster)
	}
	return nil, fmt.Errorf("reply %v is not the fence script's: outcome unknown", reply)
}

// text is a reply's string, from a client that gives string or []byte.
func text(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	s, _ := v.(string)
	return s
}

func get(r []any, i int) any {
	if i < len(r) {
		return r[i]
	}
	return nil
}

// Mark returns the fence of name: the highest token admitted under it
// (Revision 0 after Reset), and false if nothing was ever admitted.
func (f *Fence) Mark(ctx context.Context, name string) (fencing.Token, bool, error) {
	if err := f.usable(ctx, name); err != nil {
		return fencing.Token{}, false, fmt.Errorf("redisfence: Mark: %w", err)
	}
	// MGET replies nil for a missing key in every client; GET's nil is an
	// error whose type each client names its own way.
	reply, err := f.c.Do(ctx, "MGET", markKey(name))
	if err != nil {
		return fencing.Token{}, false, fmt.Errorf("redisfence: Mark %q: %w", name, err)
	}
	r, _ := reply.([]any)
	if len(r) != 1 || r[0] == nil {
		return fencing.Token{}, false, nil
	}
	s := text(r[0])
	cluster, rev, ok := strings.Cut(s, " ")
	id, err1 := strconv.ParseUint(cluster, 16, 64)
	n, err2 := strconv.ParseInt(rev, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return fencing.Token{}, false, fmt.Errorf("redisfence: Mark %q: %q is not a mark the fence wrote", name, s)
	}
	return fencing.Token{Name: name, Revision: n, Cluster: id}, true, nil
}

// Reset makes the fence of name admit every token of etcd cluster cluster
// and none of another, as sqlfence's Reset: the operator's step after etcd
// was rebuilt under a new cluster ID, once the old cluster's holders are
// stopped. A mark that already names cluster is left as it is, so running
// Reset twice never reopens it to older tokens. A zero cluster returns
// fencing.ErrInvalidArgument.
func (f *Fence) Reset(ctx context.Context, name string, cluster uint64) error {
	if err := f.usable(ctx, name); err != nil {
		return fmt.Errorf("redisfence: Reset: %w", err)
	}
	if cluster == 0 {
		return fmt.Errorf("redisfence: Reset %q: %w: zero cluster", name, fencing.ErrInvalidArgument)
	}
	if _, err := f.eval(ctx, resetMark, []string{"1", markKey(name), strconv.FormatUint(cluster, 16)}); err != nil {
		return fmt.Errorf("redisfence: Reset %q: %w", name, err)
	}
	return nil
}

func markKey(name string) string { return markPrefix + "{" + name + "}" }

func (f *Fence) nameOf(t fencing.Token) string {
	if f != nil && f.name != "" {
		return f.name
	}
	return t.Name
}

// validName refuses what fencing.ValidateName refuses and braces, which
// would move the mark out of the slot of the name's hash tag.
func validName(name string) error {
	if err := fencing.ValidateName(name); err != nil {
		return err
	}
	if strings.ContainsAny(name, "{}") {
		return fmt.Errorf("%w: %q holds '{' or '}', which Redis Cluster reads as a hash tag", fencing.ErrInvalidName, name)
	}
	return nil
}

// usable refuses a nil ctx, a Fence that New did not make and a bad name.
func (f *Fence) usable(ctx context.Context, name string) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", fencing.ErrInvalidArgument)
	case f == nil || f.c == nil:
		return fmt.Errorf("%w: Fence not made by New", fencing.ErrInvalidArgument)
	}
	return validName(name)
}

// check refuses what usable refuses and a token that cannot be compared.
func (f *Fence) check(ctx context.Context, t fencing.Token) error {
	if err := f.usable(ctx, f.nameOf(t)); err != nil {
		return err
	}
	if err := fencing.ValidateName(t.Name); err != nil {
		return err
	}
	switch {
	case t.Revision <= 0:
		return fmt.Errorf("%w: revision %d is not positive", fencing.ErrInvalidToken, t.Revision)
	case t.Cluster == 0:
		return fmt.Errorf("%w: no cluster ID (use a Hold's or Term's token, or ParseToken of its String)", fencing.ErrInvalidToken)
	}
	return nil
}
