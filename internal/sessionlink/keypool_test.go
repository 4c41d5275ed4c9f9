package sessionlink_test

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/sessionlink"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A finished slot is reused on its queue only; a retired one never; each
// is in use from Get until Put or Retire.
func TestKeyPoolReuse(t *testing.T) {
	var p sessionlink.KeyPool
	a, b := p.Get("q/"), p.Get("q/")
	if a == b || !p.InUse("q/", a) || !p.InUse("q/", b) {
		t.Fatalf("two live slots %d, %d", a, b)
	}
	p.Put("q/", a)
	p.Retire("q/", b)
	if p.InUse("q/", a) || p.InUse("q/", b) {
		t.Fatal("slots still in use after Put and Retire")
	}
	if c := p.Get("other/"); c == a || c == b {
		t.Fatalf("another queue got slot %d", c)
	}
	if c := p.Get("q/"); c != a {
		t.Fatalf("Get after Put = %d, want the finished %d", c, a)
	}
	if c := p.Get("q/"); c == b {
		t.Fatalf("the retired slot %d was handed out again", b)
	}
}

// However many queues and slots pass through it, the pool keeps at most
// MaxFreeQueues queues of at most MaxFreePerQueue finished slots, and
// nothing for slots no longer in use.
func TestKeyPoolBounded(t *testing.T) {
	var p sessionlink.KeyPool
	for i := range 3 * sessionlink.MaxFreeQueues {
		q := fmt.Sprint("q", i, "/")
		var slots []uint64
		for range 2 * sessionlink.MaxFreePerQueue {
			slots = append(slots, p.Get(q))
		}
		for _, s := range slots {
			p.Put(q, s)
		}
	}
	free, inUse, swept := p.Size()
	if free > sessionlink.MaxFreeQueues || inUse != 0 || swept != 0 {
		t.Fatalf("size %d, %d, %d", free, inUse, swept)
	}
}

// Sweep reports true once per queue: one sweeper each.
func TestKeyPoolSweepOnce(t *testing.T) {
	var p sessionlink.KeyPool
	if !p.Sweep("q/") || p.Sweep("q/") || !p.Sweep("r/") {
		t.Fatal("Sweep did not report each queue's first call only")
	}
	if _, _, swept := p.Size(); swept != 2 {
		t.Fatalf("%d swept queues, want 2", swept)
	}
}
