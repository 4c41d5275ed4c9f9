// Command guarded moves money between two balances kept in etcd, under a
// lock, with a write that commits only while the lock is held.
//
//	guarded --endpoints 127.0.0.1:2379 --seed 100 --from alice --to bob --amount 10
//	guarded --endpoints https://etcd-0:2379 --cacert ca.pem --cert me.pem --key me-key.pem --amount 10
//
// The transfer is one guarded txn: etcd applies it only if this process
// still owns the lock (guard.ErrNotOwner otherwise) and only if neither
// balance changed since it was read (Succeeded false otherwise). The two
// failures call for different reactions: a lost lock means stop, since
// another process now owns the accounts; a changed balance means read again
// and retry.
//
// The balances are the keys accounts/NAME; the lock is "accounts". Every
// step (the session, the wait for the lock, each read and write) is bounded
// by --timeout, and a step that runs out says which one it was. Connection
// flags (--endpoints, --cacert, --cert, --key, --user, --password,
// --dial-timeout) and their ETCDCTL_* variables work as for etcdctl;
// --endpoints defaults to 127.0.0.1:2379. Logs go to stderr; -v adds debug
// detail. Exit status: 0 when the amount was moved, 1 when it was not (etcd
// unreachable, a step timed out, insufficient funds, the lock lost), 2 for
// a bad command line; --help exits 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/examples/internal/connect"
	"github.com/leasehold/leasehold/examples/internal/program"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const accounts = "accounts/"

func main() { program.Main(run) }

type config struct {
	conn     connect.Config
	seed     int64
	from, to string
	amount   int64
	timeout  time.Duration
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := program.Flags("guarded", stderr, &c.conn, "127.0.0.1:2379",
		"usage: guarded [connection flags] [--seed N] [--from A] [--to B] [--amount N] [--timeout D] [-v]")
	fs.Int64Var(&c.seed, "seed", -1, "if not negative, first set both balances to this")
	fs.StringVar(&c.from, "from", "alice", "account to debit")
	fs.StringVar(&c.to, "to", "bob", "account to credit")
	fs.Int64Var(&c.amount, "amount", 10, "amount to move")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long each step (lock wait, read, write) may take")
	err := program.Parse(fs, args, func(args []string) error {
		switch {
		case len(args) > 0:
			return fmt.Errorf("unexpected argument %q", args[0])
		case c.from == "" || c.to == "" || c.from == c.to:
			return fmt.Errorf("--from %q --to %q: want two different accounts", c.from, c.to)
		case c.amount <= 0:
			return fmt.Errorf("--amount %d: want a positive amount", c.amount)
		case c.timeout <= 0:
			return fmt.Errorf("--timeout %v: want a positive duration", c.timeout)
		}
		return c.conn.Validate()
	})
	return c, err
}

// run is the command: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	cli, err := program.Connect(ctx, &c.conn, err)
	if err != nil {
		return program.Exit("guarded", stderr, err)
	}
	defer cli.Close()
	b := &bank{cli: cli, timeout: c.timeout, log: c.conn.Logger(stderr)}
	if c.seed >= 0 {
		err = b.seed(ctx, c.seed, c.from, c.to)
	}
	if err == nil {
		err = b.move(ctx, c.from, c.to, c.amount, stdout)
	}
	return program.Exit("guarded", stderr, err)
}

// bank makes transfers on cli; every call to etcd is bounded by timeout.
type bank struct {
	cli     *clientv3.Client
	timeout time.Duration
	log     *slog.Logger
}

// step runs f with a context bounded by b.timeout and names the step in
// its error.
func (b *bank) step(ctx context.Context, what string, f func(context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	err := f(sctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(sctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		return fmt.Errorf("%s: no answer within %v (--timeout): %w", what, b.timeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// finally runs a cleanup step even when ctx has ended, and logs its failure.
func (b *bank) finally(ctx context.Context, what string, f func(context.Context) error) {
	if err := b.step(context.WithoutCancel(ctx), what, f); err != nil {
		b.log.Warn("cleanup failed", "err", err)
	}
}

func (b *bank) seed(ctx context.Context, balance int64, names ...string) error {
	for _, a := range names {
		err := b.step(ctx, "seed "+accounts+a, func(ctx context.Context) error {
			_, err := b.cli.Put(ctx, accounts+a, strconv.FormatInt(balance, 10))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// move takes the accounts lock and makes one transfer. It unlocks and closes
// its session on the way out, each within the timeout, whatever happened.
func (b *bank) move(ctx context.Context, from, to string, amount int64, out io.Writer) error {
	var s *fencing.Session
	err := b.step(ctx, "create a session", func(ctx context.Context) (err error) {
		s, err = fencing.NewSession(ctx, b.cli, fencing.WithLogger(b.log))
		return err
	})
	if err != nil {
		return err
	}
	defer b.finally(ctx, "close the session", s.Close)
	m, err := fencing.NewMutex(s, "accounts")
	if err != nil {
		return err
	}
	var h *fencing.Hold
	if err := b.step(ctx, "lock accounts", func(ctx context.Context) (err error) {
		h, err = m.Lock(ctx)
		return err
	}); err != nil {
		return err
	}
	defer b.finally(ctx, "unlock accounts", h.Unlock)
	fmt.Fprintf(out, "locked accounts with token %v\n", h.Token())
	if err := b.transfer(ctx, h, from, to, amount); err != nil {
		return err
	}
	fmt.Fprintf(out, "moved %d from %s to %s\n", amount, from, to)
	return nil
}

// ErrInsufficientFunds is returned when the debited balance is too low.
var ErrInsufficientFunds = errors.New("insufficient funds")

// transfer moves amount while h owns the lock. It returns an error wrapping
// guard.ErrNotOwner, having written nothing, if h lost the lock.
func (b *bank) transfer(ctx context.Context, h *fencing.Hold, from, to string, amount int64) error {
	for {
		a, ra, err := b.balance(ctx, from)
		if err != nil {
			return err
		}
		c, rc, err := b.balance(ctx, to)
		if err != nil {
			return err
		}
		if a < amount {
			return fmt.Errorf("%s has %d, needs %d: %w", from, a, amount, ErrInsufficientFunds)
		}
		var resp *clientv3.TxnResponse
		err = b.step(ctx, "write the transfer", func(ctx context.Context) (err error) {
			resp, err = guard.Txn(ctx, h).
				If(clientv3.Compare(clientv3.ModRevision(accounts+from), "=", ra),
					clientv3.Compare(clientv3.ModRevision(accounts+to), "=", rc)).
				Then(clientv3.OpPut(accounts+from, strconv.FormatInt(a-amount, 10)),
					clientv3.OpPut(accounts+to, strconv.FormatInt(c+amount, 10))).
				Commit()
			return err
		})
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
		b.log.Info("a balance changed since it was read; reading again", "from", from, "to", to)
	}
}

// balance reads an account: its balance (0 when absent) and mod revision.
func (b *bank) balance(ctx context.Context, account string) (n, rev int64, err error) {
	err = b.step(ctx, "read "+accounts+account, func(ctx context.Context) error {
		resp, err := b.cli.Get(ctx, accounts+account)
		if err != nil || len(resp.Kvs) == 0 {
			return err
		}
		rev = resp.Kvs[0].ModRevision
		n, err = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		return err
	})
	return n, rev, err
}
