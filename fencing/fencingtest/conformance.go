package fencingtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/fencing"
)

// Fence is your fence as FenceConformance drives it: two methods of a few
// lines over your store. Write writes value to the resource that t.Name
// names, through your fence, fenced by t, passing ctx on as given. A token
// older than the name's mark must return an error wrapping
// fencing.ErrStaleToken, one of another cluster fencing.ErrClusterMismatch,
// bad input (a nil ctx, an invalid token or name) fencing.ErrInvalidArgument,
// ErrInvalidToken or ErrInvalidName, each having written nothing. Read
// returns the mark of name (ok false if nothing was admitted under it) and
// the value ("" if never written).
//
// A fence of several requests with no lock held between them (a read, then
// a write conditional on it) may also have a method SetPause(pause func())
// and call pause between them: the suite stops racing writers there until
// each has paused or returned, and the frozen writer while its successor
// writes.
type Fence interface {
	Write(ctx context.Context, t fencing.Token, value string) error
	Read(ctx context.Context, name string) (mark fencing.Token, ok bool, value string, err error)
}

// pausable is a Fence with SetPause (see Fence).
type pausable interface{ SetPause(pause func()) }

// FenceConformance runs, as subtests of t, the cases every fence must pass:
// a stale token refused, the same token again and a newer one admitted,
// another cluster's token refused, bad input refused, racing writers with
// interleaved tokens, and a writer frozen in another process after it
// checked its lock, refused once its successor wrote. Racing writers fail a
// fence that checks in one request and writes in another; the frozen writer,
// one that checks in the writer's process. Each case calls create for a
// fresh store, then open on it, and writes under names of its own; the
// package doc says what each checks.
//
// The frozen writer runs this test binary again, filtered to that case,
// against a real etcd, and calls open there with create's address:
// keep your test's setup in create and open, and make open idempotent. A nil
// create skips that case, and open gets "".
func FenceConformance(t *testing.T, create func(t *testing.T) (addr string), open func(t *testing.T, addr string) Fence) {
	t.Helper()
	if open == nil {
		t.Fatal("fencingtest: FenceConformance: nil open")
	}
	fresh := func(t *testing.T) subject {
		addr := ""
		if create != nil {
			addr = create(t)
		}
		return newSubject(t, open(t, addr))
	}
	for _, c := range []struct {
		name string
		run  func(subject)
	}{
		{"stale token refused", staleTokenRefused},
		{"same token passes again", sameTokenPassesAgain},
		{"newer token passes", newerTokenPasses},
		{"other cluster refused", otherClusterRefused},
		{"bad input refused", badInputRefused},
		{"racing writers", racingWriters},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(fresh(t)) })
	}
	t.Run("frozen writer", func(t *testing.T) { frozenWriter(t, create, open) })
}

// The clusters of the tokens the cases make by hand: any two IDs will do,
// since a fence only compares them for equality.
const (
	suiteCluster = 0x6c65617365686f6c
	otherCluster = 0x6f74686572636c75
)

// subject is one case's fence, with the case's test and context.
type subject struct {
	t   *testing.T
	f   Fence
	ctx context.Context
}

func newSubject(t *testing.T, f Fence) subject {
	t.Helper()
	if f == nil {
		t.Fatal("fencingtest: FenceConformance: open returned a nil Fence")
	}
	if p, ok := f.(pausable); ok {
		p.SetPause(func() {})
	}
	return subject{t: t, f: f, ctx: Context(t, Wait)}
}

// name returns a name that no other case, nor another run over the same
// store, writes under.
func (s subject) name(what string) string {
	return fmt.Sprintf("fencingtest/%s/%016x", what, rand.Uint64())
}

func token(name string, rev int64) fencing.Token {
	return fencing.Token{Name: name, Revision: rev, Cluster: suiteCluster}
}

// write calls Write, and fails the test, without stopping it, if Write
// panics: safe from any goroutine.
func (s subject) write(ctx context.Context, t fencing.Token, value string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.t.Errorf("fencingtest: Write(%v, %q) panicked: %v", t, value, r)
			err = fmt.Errorf("fencingtest: Write panicked: %v", r)
		}
	}()
	return s.f.Write(ctx, t, value)
}

// admit writes value with t and fails the test if the fence refuses it.
func (s subject) admit(t fencing.Token, value string) {
	s.t.Helper()
	if err := s.write(s.ctx, t, value); err != nil {
		s.t.Fatalf("fencingtest: Write(%v, %q) = %v; want it admitted", t, value, err)
	}
}

// refused writes value with t and checks that the error wraps want.
func (s subject) refused(t fencing.Token, value string, want error) {
	s.t.Helper()
	if err := s.write(s.ctx, t, value); !errors.Is(err, want) {
		s.t.Errorf("fencingtest: Write(%v, %q) = %v; want an error wrapping %v", t, value, err, want)
	}
}

// holds checks what Read says of name: the mark (none when mark is the
// zero Token) and the value.
func (s subject) holds(name string, mark fencing.Token, value, after string) {
	s.t.Helper()
	got, ok, v, err := s.f.Read(s.ctx, name)
	if err != nil {
		s.t.Fatalf("fencingtest: Read(%q) after %s: %v", name, after, err)
	}
	wantOK := mark != fencing.Token{}
	if ok != wantOK || (ok && got != mark) || v != value {
		s.t.Errorf("fencingtest: Read(%q) after %s = mark %v (ok %v), value %q; want mark %v (ok %v), value %q",
			name, after, got, ok, v, mark, wantOK, value)
	}
}

// 1. A token older than the mark is refused, and leaves the value and the
// mark as they were.
func staleTokenRefused(s subject) {
	name := s.name("stale")
	s.admit(token(name, 10), "ten")
	s.refused(token(name, 5), "five", fencing.ErrStaleToken)
	s.holds(name, token(name, 10), "ten", "a stale write")
}

// 2. The same token twice passes (a retry), and the second value wins.
func sameTokenPassesAgain(s subject) {
	name := s.name("again")
	s.admit(token(name, 7), "first")
	s.admit(token(name, 7), "second")
	s.holds(name, token(name, 7), "second", "the same token twice")
}

// 3. A fresh name reads as nothing admitted; each newer token passes and
// becomes the mark, past 2^32 too.
func newerTokenPasses(s subject) {
	name := s.name("newer")
	s.holds(name, fencing.Token{}, "", "nothing")
	for _, rev := range []int64{3, 4, 1<<32 + 5} {
		s.admit(token(name, rev), fmt.Sprint(rev))
		s.holds(name, token(name, rev), fmt.Sprint(rev), fmt.Sprintf("the write with revision %d", rev))
	}
}

// 4. A token of another etcd cluster is refused, whether its revision is
// above or below the mark: revisions of two clusters do not compare.
func otherClusterRefused(s subject) {
	name := s.name("cluster")
	s.admit(token(name, 5), "ours")
	for _, rev := range []int64{6, 4} {
		other := fencing.Token{Name: name, Revision: rev, Cluster: otherCluster}
		s.refused(other, "theirs", fencing.ErrClusterMismatch)
	}
	s.holds(name, token(name, 5), "ours", "tokens of another cluster")
}

// 7. Bad input returns one of the sentinels, never panics, and writes
// nothing: every token here is above the mark, so a write would show.
func badInputRefused(s subject) {
	name := s.name("bad")
	s.admit(token(name, 5), "good")
	var nilCtx context.Context
	for _, c := range []struct {
		what string
		ctx  context.Context
		tok  fencing.Token
	}{
		{"the zero Token", s.ctx, fencing.Token{}},
		{"revision 0", s.ctx, token(name, 0)},
		{"a negative revision", s.ctx, token(name, -6)},
		{"no cluster", s.ctx, fencing.Token{Name: name, Revision: 6}},
		{"an empty name", s.ctx, token("", 6)},
		{"a name with '#'", s.ctx, token(name+"#x", 6)},
		{"a name not UTF-8", s.ctx, token(name+"\xff", 6)},
		{"a name of 513 bytes", s.ctx, token(name+strings.Repeat("n", 513-len(name)), 6)},
		{"a nil ctx", nilCtx, token(name, 6)},
	} {
		err := s.write(c.ctx, c.tok, "bad")
		if !errors.Is(err, fencing.ErrInvalidArgument) && !errors.Is(err, fencing.ErrInvalidToken) &&
			!errors.Is(err, fencing.ErrInvalidName) {
			s.t.Errorf("fencingtest: Write with %s (%v) = %v; want an error wrapping fencing.ErrInvalidArgument, ErrInvalidToken or ErrInvalidName",
				c.what, c.tok, err)
		}
	}
	s.holds(name, token(name, 5), "good", "bad input")
}
