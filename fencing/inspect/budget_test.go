package inspect_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
)

func TestSafetyBudget(t *testing.T) {
	b, err := inspect.SafetyBudget(10*time.Second, 3*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := inspect.Budget{TTL: 10 * time.Second, Renewal: 3 * time.Second, Margin: time.Second,
		Takeover: 10500 * time.Millisecond, PartitionedWork: 9 * time.Second, RetryWindow: 6 * time.Second, Pause: time.Second}
	if b != want {
		t.Fatalf("SafetyBudget = %+v; want %+v", b, want)
	}
	for _, bad := range [][3]time.Duration{{0, 1, 1}, {10, 0, 1}, {10, 1, 0}, {10, 5, 5}, {-10, 1, 1}} {
		if _, err := inspect.SafetyBudget(bad[0]*time.Second, bad[1]*time.Second, bad[2]*time.Second); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Errorf("SafetyBudget(%v): %v; want ErrInvalidArgument", bad, err)
		}
	}
}

func TestBudgetText(t *testing.T) {
	b, err := inspect.SafetyBudget(fencing.DefaultTTL, fencing.DefaultTTL/3, fencing.DefaultTTL/10)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "≤ 10.5s") {
		t.Fatalf("budget text lacks the takeover bound:\n%s", b)
	}
}

func FuzzSafetyBudget(f *testing.F) {
	f.Add(int64(10e9), int64(3333333333), int64(1e9))
	f.Add(int64(1<<62), int64(1<<61), int64(1<<61))
	f.Add(int64(0), int64(-1), int64(1<<62))
	f.Fuzz(func(t *testing.T, ttl, renewal, margin int64) {
		b, err := inspect.SafetyBudget(time.Duration(ttl), time.Duration(renewal), time.Duration(margin))
		if err != nil {
			if !errors.Is(err, fencing.ErrInvalidArgument) {
				t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
			}
			return
		}
		if b.RetryWindow <= 0 || b.PartitionedWork <= b.RetryWindow || b.Takeover <= b.PartitionedWork || b.Pause != b.Margin {
			t.Fatalf("inconsistent budget %+v", b)
		}
		_ = b.String()
	})
}

// SafetyBudget accepts a margin exactly when NewSession does, for the
// renewal interval a session uses (TTL/3).
func TestSafetyBudgetAgreesWithNewSession(t *testing.T) {
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, time.Minute)
	ttl := 6 * time.Second
	for _, margin := range []time.Duration{-time.Second, 0, time.Millisecond, time.Second, 2999 * time.Millisecond,
		3 * time.Second, 3500 * time.Millisecond, 4 * time.Second, 6 * time.Second} {
		s, sessionErr := fencing.NewSession(ctx, c.Client(t), fencing.WithTTL(ttl), fencing.WithSafetyMargin(margin))
		if sessionErr == nil {
			s.Close(ctx)
		} else if !errors.Is(sessionErr, fencing.ErrInvalidArgument) {
			t.Fatal(sessionErr)
		}
		_, budgetErr := inspect.SafetyBudget(ttl, ttl/3, margin)
		if (sessionErr == nil) != (budgetErr == nil) {
			t.Errorf("margin %v: NewSession says %v, SafetyBudget says %v", margin, sessionErr, budgetErr)
		}
	}
}
