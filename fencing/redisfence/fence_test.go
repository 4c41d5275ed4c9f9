package redisfence_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/redisfence"
	"github.com/leasehold/leasehold/internal/testbed/redistest"
)

// value reads key outside the fence (MGET: nil when missing).
func value(t *testing.T, c redisfence.Client, key string) any {
	t.Helper()
	r, err := c.Do(ctxFor(t), "MGET", key)
	if err != nil {
		t.Fatal(err)
	}
	return r.([]any)[0]
}

func TestStaleTokenWritesNothing(t *testing.T) {
	eachClient(t, func(t *testing.T, c redisfence.Client, fence *redisfence.Fence) {
		ctx, name := ctxFor(t), unique(t)
		key := "{" + name + "}:v"
		if _, err := fence.Do(ctx, tok(name, 10), redisfence.Set(key, "new")); err != nil {
			t.Fatal(err)
		}
		_, err := fence.Do(ctx, tok(name, 9), redisfence.Set(key, "old"), redisfence.IncrBy("{"+name+"}:n", 1))
		if !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("Do with an older token = %v; want ErrStaleToken", err)
		}
		if got := value(t, c, key); got != "new" {
			t.Errorf("value = %v after a stale Do; want new", got)
		}
		if got := value(t, c, "{"+name+"}:n"); got != nil {
			t.Errorf("counter = %v after a stale Do; want none", got)
		}
		mark, ok, err := fence.Mark(ctx, name)
		if err != nil || !ok || mark != tok(name, 10) {
			t.Errorf("Mark = %v, %v, %v; want %v", mark, ok, err, tok(name, 10))
		}
	})
}

func TestSameTokenAgainAndNewer(t *testing.T) {
	eachClient(t, func(t *testing.T, c redisfence.Client, fence *redisfence.Fence) {
		ctx, name := ctxFor(t), unique(t)
		key := "{" + name + "}:v"
		for _, step := range []struct {
			rev   int64
			value string
		}{{5, "a"}, {5, "b"}, {6, "c"}} {
			if _, err := fence.Do(ctx, tok(name, step.rev), redisfence.Set(key, step.value)); err != nil {
				t.Fatalf("Do at %d: %v", step.rev, err)
			}
			if got := value(t, c, key); got != step.value {
				t.Fatalf("value = %v; want %s", got, step.value)
			}
		}
	})
}

// Revisions above 2^53, where Lua's numbers (doubles) can no longer tell
// neighbours apart: the script compares them as decimal strings.
func TestRevisionsBeyondLuaNumbers(t *testing.T) {
	eachClient(t, func(t *testing.T, c redisfence.Client, fence *redisfence.Fence) {
		ctx, name := ctxFor(t), unique(t)
		const big = 1<<53 + 1
		if _, err := fence.Do(ctx, tok(name, big)); err != nil {
			t.Fatal(err)
		}
		if _, err := fence.Do(ctx, tok(name, big-1)); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("Do at 2^53 after 2^53+1 = %v; want ErrStaleToken", err)
		}
		if _, err := fence.Do(ctx, tok(name, 99)); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("Do at 99 (fewer digits) = %v; want ErrStaleToken", err)
		}
		if _, err := fence.Do(ctx, tok(name, big+1)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestOtherClusterRefusedUntilReset(t *testing.T) {
	eachClient(t, func(t *testing.T, c redisfence.Client, fence *redisfence.Fence) {
		ctx, name := ctxFor(t), unique(t)
		key := "{" + name + "}:v"
		if _, err := fence.Do(ctx, tok(name, 10), redisfence.Set(key, "ours")); err != nil {
			t.Fatal(err)
		}
		other := fencing.Token{Name: name, Revision: 50, Cluster: 0xabc}
		if _, err := fence.Do(ctx, other, redisfence.Set(key, "theirs")); !errors.Is(err, fencing.ErrClusterMismatch) {
			t.Fatalf("Do with another cluster's token = %v; want ErrClusterMismatch", err)
		}
		if got := value(t, c, key); got != "ours" {
			t.Fatalf("value = %v; want ours", got)
		}
		for range 2 { // twice: a second Reset must not reopen the fence
			if err := fence.Reset(ctx, name, 0xabc); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := fence.Do(ctx, tok(name, 11)); !errors.Is(err, fencing.ErrClusterMismatch) {
			t.Fatalf("Do with the old cluster's token after Reset = %v; want ErrClusterMismatch", err)
		}
		if _, err := fence.Do(ctx, fencing.Token{Name: name, Revision: 1, Cluster: 0xabc}, redisfence.Set(key, "theirs")); err != nil {
			t.Fatalf("Do with the adopted cluster's token: %v", err)
		}
	})
}

// Every Op, with the result its doc promises.
func TestOpsAndTheirResults(t *testing.T) {
	eachClient(t, func(t *testing.T, c redisfence.Client, fence *redisfence.Fence) {
		ctx, name := ctxFor(t), unique(t)
		k := func(s string) string { return "{" + name + "}:" + s }
		res, err := fence.Do(ctx, tok(name, 1),
			redisfence.Set(k("s"), "v1"),
			redisfence.Set(k("s"), "v2", redisfence.IfAbsent()),
			redisfence.Set(k("s"), "v3", redisfence.IfPresent(), redisfence.ReturnOld()),
			redisfence.Set(k("ttl"), "x", redisfence.WithTTL(time.Hour)),
			redisfence.Set(k("ttl"), "y", redisfence.KeepTTL()),
			redisfence.Get(k("s")),
			redisfence.Get(k("missing")),
			redisfence.HSet(k("h"), "f1", "a", "f2", "b"),
			redisfence.IncrBy(k("n"), 5),
			redisfence.RPush(k("l"), "p", "q"),
			redisfence.Script(`redis.call('SET', KEYS[1], ARGV[1]) return redis.call('STRLEN', KEYS[1])`, []string{k("raw")}, "four"),
			redisfence.Script(`redis.call('DEL', KEYS[1])`, []string{k("raw")}), // returns nothing
			redisfence.Del(k("s"), k("missing")),
		)
		if err != nil {
			t.Fatal(err)
		}
		want := []any{"OK", nil, "v1", "OK", "OK", "v3", nil, int64(2), int64(5), int64(2), int64(4), nil, int64(1)}
		if len(res) != len(want) {
			t.Fatalf("results = %#v; want %#v", res, want)
		}
		for i := range want {
			if res[i] != want[i] {
				t.Errorf("result %d = %#v; want %#v", i, res[i], want[i])
			}
		}
		ttl, err := c.Do(ctx, "PTTL", k("ttl"))
		if n, _ := ttl.(int64); err != nil || n <= 0 || n > time.Hour.Milliseconds() {
			t.Errorf("PTTL after KeepTTL = %v, %v; want the hour kept", ttl, err)
		}
	})
}

// Keys outside the mark's slot, bad tokens and bad Ops are refused before
// anything is sent: no key appears.
func TestBadInputSendsNothing(t *testing.T) {
	eachClient(t, func(t *testing.T, c redisfence.Client, fence *redisfence.Fence) {
		ctx, name := ctxFor(t), unique(t)
		for _, tc := range []struct {
			what string
			do   func() error
			want error
		}{
			{"key without the tag", func() error { _, err := fence.Do(ctx, tok(name, 1), redisfence.Set("plain", "x")); return err }, redisfence.ErrCrossSlot},
			{"second key elsewhere", func() error {
				_, err := fence.Do(ctx, tok(name, 1), redisfence.Set("{"+name+"}:a", "x"), redisfence.Del("{other}:b"))
				return err
			}, redisfence.ErrCrossSlot},
			{"zero op", func() error { _, err := fence.Do(ctx, tok(name, 1), redisfence.Op{}); return err }, fencing.ErrInvalidArgument},
			{"empty script", func() error { _, err := fence.Do(ctx, tok(name, 1), redisfence.Script("", nil)); return err }, fencing.ErrInvalidArgument},
			{"empty key", func() error { _, err := fence.Do(ctx, tok(name, 1), redisfence.Del("")); return err }, fencing.ErrInvalidArgument},
			{"an op of 7001 values", func() error {
				_, err := fence.Do(ctx, tok(name, 1), redisfence.Set("{"+name+"}:a", "x"), redisfence.RPush("{"+name+"}:l", make([]string, 7001)...))
				return err
			}, fencing.ErrInvalidArgument},
			{"the mark as a key", func() error {
				_, err := fence.Do(ctx, tok(name, 1), redisfence.Del("leasehold:fence:{"+name+"}"))
				return err
			}, fencing.ErrInvalidArgument},
			{"New with an empty name", func() error { _, err := redisfence.New(c, redisfence.WithName("")); return err }, fencing.ErrInvalidName},
			{"Del of nothing", func() error { _, err := fence.Do(ctx, tok(name, 1), redisfence.Del()); return err }, fencing.ErrInvalidArgument},
			{"HSet of an odd list", func() error { _, err := fence.Do(ctx, tok(name, 1), redisfence.HSet("{"+name+"}:h", "f")); return err }, fencing.ErrInvalidArgument},
			{"RPush of nothing", func() error { _, err := fence.Do(ctx, tok(name, 1), redisfence.RPush("{"+name+"}:l")); return err }, fencing.ErrInvalidArgument},
			{"zero TTL", func() error {
				_, err := fence.Do(ctx, tok(name, 1), redisfence.Set("{"+name+"}:a", "x", redisfence.WithTTL(0)))
				return err
			}, fencing.ErrInvalidArgument},
			{"NX and XX", func() error {
				_, err := fence.Do(ctx, tok(name, 1), redisfence.Set("{"+name+"}:a", "x", redisfence.IfAbsent(), redisfence.IfPresent()))
				return err
			}, fencing.ErrInvalidArgument},
			{"zero SetOption", func() error {
				_, err := fence.Do(ctx, tok(name, 1), redisfence.Set("{"+name+"}:a", "x", redisfence.SetOption{}))
				return err
			}, fencing.ErrInvalidArgument},
			{"zero token", func() error { _, err := fence.Do(ctx, fencing.Token{}); return err }, fencing.ErrInvalidName},
			{"revision 0", func() error { _, err := fence.Do(ctx, tok(name, 0)); return err }, fencing.ErrInvalidToken},
			{"no cluster", func() error { _, err := fence.Do(ctx, fencing.Token{Name: name, Revision: 1}); return err }, fencing.ErrInvalidToken},
			{"brace in name", func() error { _, err := fence.Do(ctx, tok("a{b}", 1)); return err }, fencing.ErrInvalidName},
			{"nil ctx", func() error {
				//lint:ignore SA1012 a nil ctx is the bad input under test
				_, err := fence.Do(nil, tok(name, 1))
				return err
			}, fencing.ErrInvalidArgument},
			{"nil fence", func() error { _, err := (*redisfence.Fence)(nil).Do(ctx, tok(name, 1)); return err }, fencing.ErrInvalidArgument},
			{"Mark of a bad name", func() error { _, _, err := fence.Mark(ctx, "a{b}"); return err }, fencing.ErrInvalidName},
			{"Reset to cluster 0", func() error { return fence.Reset(ctx, name, 0) }, fencing.ErrInvalidArgument},
			{"New without a client", func() error { _, err := redisfence.New(nil); return err }, fencing.ErrInvalidArgument},
			{"New with a bad name", func() error { _, err := redisfence.New(c, redisfence.WithName("x}")); return err }, fencing.ErrInvalidName},
		} {
			if err := tc.do(); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v; want %v", tc.what, err, tc.want)
			}
		}
		if n, err := c.Do(ctx, "EXISTS", "plain", "{"+name+"}:a", "leasehold:fence:{"+name+"}"); err != nil || n != int64(0) {
			t.Errorf("EXISTS after refused calls = %v, %v; want 0", n, err)
		}
	})
}

// A server that lost its scripts (a restart, SCRIPT FLUSH) gets the body
// again; a raw script's syntax error writes nothing, the raise included.
func TestScriptsReloadedAndBadScriptWritesNothing(t *testing.T) {
	eachClient(t, func(t *testing.T, c redisfence.Client, fence *redisfence.Fence) {
		ctx, name := ctxFor(t), unique(t)
		if _, err := c.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		if _, err := fence.Do(ctx, tok(name, 1), redisfence.IncrBy("{"+name+"}:n", 1)); err != nil {
			t.Fatalf("Do after SCRIPT FLUSH: %v", err)
		}
		_, err := fence.Do(ctx, tok(name, 2), redisfence.Script("this is not lua", []string{"{" + name + "}:n"}))
		if err == nil {
			t.Fatal("Do with a script that does not compile succeeded")
		}
		if mark, _, _ := fence.Mark(ctx, name); mark.Revision != 1 {
			t.Errorf("mark = %v after a script that did not compile; want revision 1", mark)
		}
	})
}

// An error Redis raises in an op ends the script there: what ran before it
// stays, as the doc says.
func TestRedisErrorEndsTheScript(t *testing.T) {
	eachClient(t, func(t *testing.T, c redisfence.Client, fence *redisfence.Fence) {
		ctx, name := ctxFor(t), unique(t)
		k := func(s string) string { return "{" + name + "}:" + s }
		_, err := fence.Do(ctx, tok(name, 3), redisfence.Set(k("a"), "x"), redisfence.IncrBy(k("a"), 1), redisfence.Set(k("b"), "y"))
		if err == nil {
			t.Fatal("INCRBY of a non-number succeeded")
		}
		if got := value(t, c, k("a")); got != "x" {
			t.Errorf("first op's write = %v; want x (kept)", got)
		}
		if got := value(t, c, k("b")); got != nil {
			t.Errorf("op after the error wrote %v", got)
		}
	})
}

// On Redis Cluster: the fence's slot agrees with the server's CLUSTER
// KEYSLOT, and fenced writes run on a cluster node.
func TestOnRedisCluster(t *testing.T) {
	srv := redistest.Start(t, "--cluster-enabled", "yes")
	if _, err := srv.Command("CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		t.Fatal(err)
	}
	c := openGoRedis(t, srv.Addr)
	ctx, name := ctxFor(t), "orders"
	fence, err := redisfence.New(c)
	if err != nil {
		t.Fatal(err)
	}
	fencingtest.WaitFor(t, 30*time.Second, "the cluster to accept writes", func() bool {
		_, err := fence.Do(ctx, tok(name, 1), redisfence.IncrBy("{orders}:total", 1))
		return err == nil
	})
	res, err := fence.Do(ctx, tok(name, 2), redisfence.IncrBy("{orders}:total", 10), redisfence.RPush("x{orders}y", "a"))
	if err != nil || res[0] != int64(11) {
		t.Fatalf("Do on a cluster node = %v, %v", res, err)
	}
	// A key of another slot, sent without the fence's check, is what the
	// server itself refuses.
	if _, err := c.Do(ctx, "EVAL", "return 1", "2", "{orders}:a", "{x}:b"); err == nil {
		t.Error("the server took a script with keys of two slots")
	}
	for _, key := range []string{"{orders}:total", "x{orders}y", "plain", "{}", "{}{a}", "a{", "{user1000}.following", "foo{}{bar}"} {
		if _, err := fence.Do(ctx, tok(name, 3), redisfence.Script("return 1", []string{key})); (err == nil) != (keyslot(t, srv, key) == keyslot(t, srv, "{orders}")) {
			t.Errorf("key %q: Do = %v, but the server's slot is %d and the mark's %d", key, err, keyslot(t, srv, key), keyslot(t, srv, "{orders}"))
		}
	}
}

func keyslot(t *testing.T, srv *redistest.Server, key string) int {
	t.Helper()
	r, err := srv.Command("CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(r)
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %q = %q", key, r)
	}
	return n
}

// The slot function agrees with the server's on random keys, tags included.
func TestSlotAgreesWithServer(t *testing.T) {
	srv := redistest.Start(t, "--cluster-enabled", "yes")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = "ab{}x\xff"[rng.IntN(6)]
		}
		if got, want := redisfence.Slot(string(b)), keyslot(t, srv, string(b)); got != want {
			t.Fatalf("slot(%q) = %d; the server says %d", b, got, want)
		}
	}
}

// A raw script's error that names NOSCRIPT is its own, not the server's
// "no such script": the script ran, and is not sent again.
func TestScriptErrorNamingNoscriptRunsOnce(t *testing.T) {
	eachClient(t, func(t *testing.T, c redisfence.Client, fence *redisfence.Fence) {
		ctx, name := ctxFor(t), unique(t)
		key := "{" + name + "}:n"
		for _, body := range []string{`error('NOSCRIPT quota')`, `error({err = 'NOSCRIPT quota'})`} {
			fence.Do(ctx, tok(name, 1), redisfence.IncrBy(key, 1), redisfence.Script(body, nil)) // loads the script
			before := value(t, c, key)
			if _, err := fence.Do(ctx, tok(name, 1), redisfence.IncrBy(key, 1), redisfence.Script(body, nil)); err == nil {
				t.Fatalf("%s: no error", body)
			}
			after := value(t, c, key)
			if b, _ := strconv.Atoi(fmt.Sprint(before)); fmt.Sprint(after) != strconv.Itoa(b+1) {
				t.Errorf("%s: counter %v then %v; want one increment", body, before, after)
			}
		}
	})
}

// A closed client fails the call at once with its error, whichever client.
func TestClosedClientFailsFast(t *testing.T) {
	srv := redistest.Shared(t)
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			c := cl.open(t, srv.Addr)
			fence, err := redisfence.New(c)
			if err != nil {
				t.Fatal(err)
			}
			switch c := c.(type) {
			case goRedis:
				c.Close()
			case rueidisClient:
				c.Close()
			}
			ctx, name := ctxFor(t), unique(t)
			if _, err := fence.Do(ctx, tok(name, 1), redisfence.IncrBy("{"+name+"}:n", 1)); err == nil {
				t.Fatal("Do on a closed client succeeded")
			}
			if _, _, err := fence.Mark(ctx, name); err == nil {
				t.Fatal("Mark on a closed client succeeded")
			}
			if got, err := srv.Command("EXISTS", "{"+name+"}:n", "leasehold:fence:{"+name+"}"); err != nil || got != "0" {
				t.Fatalf("EXISTS = %q, %v; want 0", got, err)
			}
		})
	}
}
