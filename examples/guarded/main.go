// Command guarded moves money between two balances kept in etcd, under a
// lock, with a write that commits only while the lock is held.
//
//	go run ./examples/guarded --endpoints 127.0.0.1:2379 --seed 100 --from alice --to bob --amount 10
//
// The transfer is one guarded txn: etcd applies it only if this process
// still owns the lock (guard.ErrNotOwner otherwise) and only if neither
// balance changed since it was read (Succeeded false otherwise). The two
// failures call for different reactions: a lost lock means stop, since
// another process now owns the accounts; a changed balance means read again
// and retry.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const accounts = "accounts/"

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	seed := flag.Int64("seed", -1, "if not negative, first set both balances to this")
	from := flag.String("from", "alice", "account to debit")
	to := flag.String("to", "bob", "account to credit")
	amount := flag.Int64("amount", 10, "amount to move")
	flag.Parse()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "guarded:", err)
		os.Exit(1)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if *seed >= 0 {
		for _, a := range []string{*from, *to} {
			if _, err := cli.Put(ctx, accounts+a, strconv.FormatInt(*seed, 10)); err != nil {
				fmt.Fprintln(os.Stderr, "guarded:", err)
				os.Exit(1)
			}
		}
	}
	if err := run(ctx, cli, *from, *to, *amount, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "guarded:", err)
		os.Exit(1)
	}
}

// run takes the accounts lock and makes one transfer.
func run(ctx context.Context, cli *clientv3.Client, from, to string, amount int64, out io.Writer) error {
	s, err := fencing.NewSession(ctx, cli)
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	m, err := fencing.NewMutex(s, "accounts")
	if err != nil {
		return err
	}
	h, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	defer h.Unlock(context.WithoutCancel(ctx))
	fmt.Fprintf(out, "locked accounts with token %v\n", h.Token())
	if err := transfer(ctx, cli, h, from, to, amount); err != nil {
		return err
	}
	fmt.Fprintf(out, "moved %d from %s to %s\n", amount, from, to)
	return nil
}

// ErrInsufficientFunds is returned when the debited balance is too low.
var ErrInsufficientFunds = errors.New("insufficient funds")

// transfer moves amount while h owns the lock. It returns an error wrapping
// guard.ErrNotOwner, having written nothing, if h lost the lock.
func transfer(ctx context.Context, cli *clientv3.Client, h *fencing.Hold, from, to string, amount int64) error {
	for {
		a, ra, err := balance(ctx, cli, from)
		if err != nil {
			return err
		}
		b, rb, err := balance(ctx, cli, to)
		if err != nil {
			return err
		}
		if a < amount {
			return fmt.Errorf("%s has %d, needs %d: %w", from, a, amount, ErrInsufficientFunds)
		}
		resp, err := guard.Txn(ctx, h).
			If(clientv3.Compare(clientv3.ModRevision(accounts+from), "=", ra),
				clientv3.Compare(clientv3.ModRevision(accounts+to), "=", rb)).
			Then(clientv3.OpPut(accounts+from, strconv.FormatInt(a-amount, 10)),
				clientv3.OpPut(accounts+to, strconv.FormatInt(b+amount, 10))).
			Commit()
		switch {
		case errors.Is(err, guard.ErrNotOwner):
			return fmt.Errorf("lock lost before the transfer committed; nothing was written: %w", err)
		case err != nil:
			return err
		case resp.Succeeded:
			return nil
		}
		// A balance changed since we read it: somebody wrote without the
		// lock. Read again.
	}
}

func balance(ctx context.Context, cli *clientv3.Client, account string) (int64, int64, error) {
	resp, err := cli.Get(ctx, accounts+account)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, 0, err
	}
	n, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	return n, resp.Kvs[0].ModRevision, err
}
