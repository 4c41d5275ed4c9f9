package fencing

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/sessionlink"
)

// BenchmarkTenure measures what reporting one ownership costs a Lock and
// Unlock in this process, without etcd: Track then Release, with no hooks
// ("plain", as every Lock pays) and with an Observer and a debug text logger
// ("observed").
func BenchmarkTenure(b *testing.B) {
	for _, name := range []string{"plain", "observed"} {
		b.Run(name, func(b *testing.B) {
			s := &Session{log: slog.New(slog.DiscardHandler), link: &sessionlink.Link{Owners: new(ownwatch.Registry)}}
			if name == "observed" {
				s.log = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug})).With("lease", "1")
				s.obs = Observer{OnAcquire: func(AcquireEvent) {}, OnRelease: func(ReleaseEvent) {}}
			}
			s.ctx, s.cancel = context.WithCancelCause(context.Background())
			defer s.cancel(nil)
			b.ReportAllocs()
			for b.Loop() {
				s.track(KindLock, Token{Name: "n", Revision: 5}, "k", 0).Release(nil)
			}
		})
	}
}

// With no observer and no logger, reporting an ownership costs a Lock
// nothing: no allocation, no registration, no goroutine.
func TestTrackWithoutListenersIsFree(t *testing.T) {
	s := &Session{log: slog.New(slog.DiscardHandler), link: &sessionlink.Link{Owners: new(ownwatch.Registry)}}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	defer s.cancel(nil)
	allocs := testing.AllocsPerRun(100, func() {
		s.track(KindLock, Token{Name: "n", Revision: 5}, "k", 0).Release(nil)
	})
	// No allocation proves no registration too: Register allocates.
	if allocs != 0 {
		t.Errorf("Track+Release with nobody listening: %v allocations", allocs)
	}
}
