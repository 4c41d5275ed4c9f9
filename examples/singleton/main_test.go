package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/etcdtest"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// The command runs with the term's token, is stopped when an operator
// deletes the term's key, runs again under a new term, and stops when
// singleton is cancelled.
func TestSingletonStopsCommandOnLoss(t *testing.T) {
	c := etcdtest.Single(t)
	var out, logs etcdtest.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, c.Client(t), config{name: "backup", ttl: 2 * time.Second, grace: 5 * time.Second,
			argv:   []string{"sh", "-c", `echo "token $LEASEHOLD_TOKEN"; echo "key $LEASEHOLD_KEY"; exec sleep 600`},
			stdout: &out, stderr: &logs})
	}()
	etcdtest.WaitFor(t, 30*time.Second, "the command to start", func() bool {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\n%s", err, logs.String())
		default:
		}
		return strings.Contains(out.String(), "key ")
	})
	key, tok := field(out.String(), "key "), field(out.String(), "token ")
	first, err := fencing.ParseToken(tok)
	if err != nil || first.Name != "backup" {
		t.Fatalf("LEASEHOLD_TOKEN = %q: %v", tok, err)
	}
	c.Delete(t, key)
	etcdtest.WaitFor(t, 30*time.Second, "the command to run again", func() bool { return strings.Count(out.String(), "key ") == 2 })
	if !strings.Contains(logs.String(), "stopping the command") {
		t.Fatalf("no stop logged:\n%s", logs.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
	if keys := c.Keys(t, "leasehold/"); len(keys) != 0 {
		t.Fatalf("keys left: %q", keys)
	}
}

// field returns the first value printed after prefix at the start of a line.
func field(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return v
		}
	}
	return ""
}
