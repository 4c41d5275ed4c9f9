package revqueue_test

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/revqueue"
)

// A queue with no retired slot hands out its lowest slot not in use, and
// keeps nothing once its slots are back; each slot is in use from Get until
// Put or Retire.
func TestKeyPoolReuse(t *testing.T) {
	var p revqueue.KeyPool
	a, b := p.Get("q/"), p.Get("q/")
	if a == b || !p.InUse("q/", a) || !p.InUse("q/", b) {
		t.Fatalf("two live slots %d, %d", a, b)
	}
	p.Put("q/", a)
	if p.InUse("q/", a) {
		t.Fatal("slot still in use after Put")
	}
	if c := p.Get("q/"); c != a {
		t.Fatalf("Get after Put = %d, want the finished %d", c, a)
	}
	for i := range 3 * revqueue.MaxFreeQueues {
		q := fmt.Sprint("many", i, "/")
		if c := p.Get(q); c != a {
			t.Fatalf("queue %q: first slot %d, want %d as on every queue", q, c, a)
		}
		p.Put(q, a)
	}
	if free, _, _ := p.Size(); free != 0 {
		t.Fatalf("%d queues with finished slots kept, want none", free)
	}
}

// A retired slot is never handed out again on its queue, which from then on
// keeps its finished slots and takes new ones above every slot handed out;
// other queues go on as before.
func TestKeyPoolRetire(t *testing.T) {
	var p revqueue.KeyPool
	a, b, c := p.Get("q/"), p.Get("q/"), p.Get("q/")
	p.Retire("q/", a)
	if p.InUse("q/", a) {
		t.Fatal("slot still in use after Retire")
	}
	p.Put("q/", c)
	seen := map[uint64]bool{b: true}
	for range 2 * revqueue.MaxFreePerQueue {
		n := p.Get("q/")
		if n == a || seen[n] {
			t.Fatalf("Get handed out slot %d again (retired %d, live %v)", n, a, seen)
		}
		seen[n] = true
	}
	if !seen[c] {
		t.Fatalf("the finished slot %d was not reused", c)
	}
	p.Retire("q/", b)
	if n := p.Get("other/"); n != a {
		t.Fatalf("another queue's first slot = %d, want %d", n, a)
	}
}

// However many queues and slots pass through it, the pool keeps at most
// MaxFreeQueues queues of at most MaxFreePerQueue finished slots, and
// nothing for slots no longer in use.
func TestKeyPoolBounded(t *testing.T) {
	var p revqueue.KeyPool
	for i := range 3 * revqueue.MaxFreeQueues {
		q := fmt.Sprint("q", i, "/")
		p.Retire(q, p.Get(q))
		var slots []uint64
		for range 2 * revqueue.MaxFreePerQueue {
			slots = append(slots, p.Get(q))
		}
		for _, s := range slots {
			p.Put(q, s)
		}
	}
	free, inUse, swept := p.Size()
	if free > revqueue.MaxFreeQueues || inUse != 0 || swept > revqueue.MaxSweptQueues {
		t.Fatalf("size %d, %d, %d", free, inUse, swept)
	}
}

// Past MaxSweptQueues marks, a queue retiring its first slot is not marked,
// and still never gets that slot back, nor does any other queue get a slot
// it may have retired.
func TestKeyPoolPastSweptMarks(t *testing.T) {
	var p revqueue.KeyPool
	for i := range revqueue.MaxSweptQueues {
		q := fmt.Sprint("q", i, "/")
		p.Retire(q, p.Get(q))
	}
	late := p.Get("late/")
	p.Retire("late/", late)
	if _, _, swept := p.Size(); swept != revqueue.MaxSweptQueues {
		t.Fatalf("%d queues marked swept, want %d", swept, revqueue.MaxSweptQueues)
	}
	for range 2 * revqueue.MaxFreePerQueue {
		if n := p.Get("late/"); n <= late {
			t.Fatalf("Get handed out slot %d of a queue that retired slot %d", n, late)
		}
	}
	if n := p.Get("fresh/"); n <= late {
		t.Fatalf("a fresh queue got slot %d, at or below the retired %d", n, late)
	}
}
