package sqlfence_test

import (
	"database/sql"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/sqlfence"
)

// The story the package exists for, with real tokens from a real etcd: a
// holder loses its lease (revoked by a second client, as an expiry would)
// without noticing, a successor locks and writes; the old holder's write,
// made with the token it still has in hand, is refused by the database.
func TestLostHolderRefusedByDatabase(t *testing.T) {
	c := fencingtest.Single(t)
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, fence *sqlfence.Fence) {
		ctx := ctxFor(t)
		lock := func() (*fencing.Session, *fencing.Hold) {
			s, err := fencing.NewSession(ctx, c.Client(t), fencing.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(ctxFor(t)) })
			m, err := fencing.NewMutex(s, "billing/"+b.name)
			if err != nil {
				t.Fatal(err)
			}
			h, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return s, h
		}
		write := func(h *fencing.Hold) error {
			return fence.Tx(ctx, h.Token(), func(tx *sql.Tx) error { return appendTo(ctx, b, tx, h.Token().Revision) })
		}
		sa, old := lock()
		if old.Token().Cluster == 0 || old.Token().Cluster != sa.Cluster() {
			t.Fatalf("hold token %v: cluster %x, session's %x", old.Token(), old.Token().Cluster, sa.Cluster())
		}
		if err := write(old); err != nil {
			t.Fatal(err)
		}
		c.Revoke(t, sa.Lease())
		_, successor := lock()
		if err := write(successor); err != nil {
			t.Fatal(err)
		}
		if err := write(old); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("old holder's write after its successor's = %v; want ErrStaleToken", err)
		}
		want := []int64{old.Token().Revision, successor.Token().Revision}
		if got := ledger(t, db); !slices.Equal(got, want) {
			t.Fatalf("ledger = %v; want %v", got, want)
		}
		mark, _, _ := fence.Mark(ctx, successor.Token().Name)
		if mark != successor.Token() {
			t.Fatalf("Mark = %v; want the successor's token %v", mark, successor.Token())
		}
		// The token's text carries the cluster, so a token sent to another
		// process is fenced the same way.
		back, err := fencing.ParseToken(old.Token().String())
		if err != nil || back != old.Token() {
			t.Fatalf("ParseToken(%q) = %v, %v", old.Token().String(), back, err)
		}
	})
}
