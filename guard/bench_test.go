package guard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkWrite compares, on one embedded etcd, a plain Put, a guard.Put
// (one flat txn) and the IsOwner txn of etcd's concurrency package, with 1
// and 16 concurrent writers on one client.
func BenchmarkWrite(b *testing.B) {
	c := fencingtest.Single(b)
	cli := c.Client(b)
	ctx := context.Background()
	s := newSession(b, cli)
	h := lock(b, s, "bench")
	cs, err := concurrency.NewSession(cli)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	cm := concurrency.NewMutex(cs, "bench-concurrency")
	if err := cm.Lock(ctx); err != nil {
		b.Fatal(err)
	}
	writes := map[string]func(key string) error{
		"put": func(key string) error {
			_, err := cli.Put(ctx, key, "v")
			return err
		},
		"guard": func(key string) error {
			_, err := guard.Put(ctx, h, key, "v")
			return err
		},
		"concurrency": func(key string) error {
			_, err := cli.Txn(ctx).If(cm.IsOwner()).Then(clientv3.OpPut(key, "v")).Commit()
			return err
		},
	}
	for _, writers := range []int{1, 16} {
		for _, name := range []string{"put", "guard", "concurrency"} {
			b.Run(fmt.Sprintf("%s/writers=%d", name, writers), func(b *testing.B) {
				write(b, writers, writes[name])
			})
		}
	}
}

func write(b *testing.B, writers int, f func(key string) error) {
	var wg sync.WaitGroup
	per := b.N/writers + 1
	b.ResetTimer()
	for w := range writers {
		key := fmt.Sprintf("bench/%d", w)
		wg.Go(func() {
			for range per {
				if err := f(key); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
