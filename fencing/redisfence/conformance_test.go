package redisfence_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/redisfence"
	"github.com/leasehold/leasehold/internal/testbed/redistest"
)

// The fence passes the conformance suite every fence must pass, through
// both clients: each case gets a redis-server of its own, which the suite's
// frozen writer reaches again from its process by address.
func TestFenceConformance(t *testing.T) {
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			fencingtest.FenceConformance(t,
				func(t *testing.T) string { return redistest.Start(t).Addr },
				func(t *testing.T, addr string) fencingtest.Fence {
					c := cl.open(t, addr)
					fence, err := redisfence.New(c)
					if err != nil {
						t.Fatal(err)
					}
					return kv{c, fence}
				})
		})
	}
}

// kv is the suite's adapter: one value per name, at "{NAME}:value", set by a
// fenced Do and read beside the fence's Mark.
type kv struct {
	c     redisfence.Client
	fence *redisfence.Fence
}

func (s kv) Write(ctx context.Context, t fencing.Token, value string) error {
	_, err := s.fence.Do(ctx, t, redisfence.Set("{"+t.Name+"}:value", value))
	return err
}

func (s kv) Read(ctx context.Context, name string) (fencing.Token, bool, string, error) {
	mark, ok, err := s.fence.Mark(ctx, name)
	if err != nil {
		return mark, ok, "", err
	}
	r, err := s.c.Do(ctx, "MGET", "{"+name+"}:value")
	if err != nil {
		return mark, ok, "", err
	}
	v, _ := r.([]any)[0].(string)
	return mark, ok, v, nil
}
