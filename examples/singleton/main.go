// Command singleton runs a command on at most one machine at a time, and
// stops it before another machine can start it.
//
//	singleton --name nightly-backup --endpoints https://etcd-0:2379 --cacert ca.pem --cert me.pem --key me-key.pem -- ./backup.sh --full
//
// Every replica campaigns in the election NAME. The leader runs the command
// with LEASEHOLD_NAME, LEASEHOLD_TOKEN (the term's fencing token, as
// fencing.Token's String writes it: "name@revision#cluster", the cluster ID
// in hex; fencing.ParseToken reads it) and LEASEHOLD_KEY in its environment,
// so the command can fence its own writes: on the key's create revision
// being the token's revision, never on the key merely existing (a session
// reuses a finished term's key).
// When the command exits 0, singleton resigns and exits 0; when it fails,
// singleton resigns and campaigns again after a backoff. SIGINT or SIGTERM
// stops the command, resigns so another replica takes over at once, and
// exits 0.
//
// # Many commands, balanced: --group
//
//	singleton --group billing --names invoices,refunds,payouts,ledger --endpoints ... -- ./worker.sh
//
// runs one copy of the command per name, each on one replica of the group:
// with R replicas, each runs about 1/R of the names (see election.RunGroup).
// The command learns its name from LEASEHOLD_NAME. A replica that joins
// takes its share, stopping those commands on the others first; one that
// exits (SIGINT, SIGTERM) hands its names to the others at once; one that
// crashes loses them within a TTL. Each command is a service here: when it
// exits, with any status, it is started again after a backoff, on whichever
// replica then leads its name. Every guarantee below holds for each name.
//
// # At most N copies: --permits
//
//	singleton --name migrations --permits 3 --endpoints ... -- ./migrate.sh
//
// runs the command on at most N replicas at once: each takes one of the N
// permits of the semaphore NAME (fencing.Semaphore, first come first
// served) and runs one copy under it, with LEASEHOLD_TOKEN the permit's
// token. What follows holds for each permit as for the single copy: the
// process group, the keeper and its deadline, and a running record per
// permit (leasehold/NAME#singleton/0 to /N-1; a new holder starts only
// once it has claimed one, so N records bound the commands whatever
// happened to the runners). Every replica of a name must give the same
// --permits: a replica that meets another N before its first permit
// exits 1 (fencing.ErrLimitMismatch) rather than enforce another limit, and one started with --permits while others run NAME
// without it (or the reverse) exits 1 too. A replica that has held a
// permit keeps trying, with warnings, for up to three TTLs of meeting
// another N (the replica of the other N most likely exits or is stopped
// first), then exits 1 as well. To change N while replicas run, give the
// name a limit of its own (fencing.Semaphore.SetLimit): every replica
// follows it from its next permit, whatever its --permits, and logs it.
//
// # The guarantee: at most one copy of the command, anywhere, at any moment
//
// The command runs in a process group of its own, under a small keeper
// process (this program, re-executed) that holds the term's deadline, the
// session's ValidUntil, on the machine's monotonic clock. The group gets
// SIGTERM, then SIGKILL after --grace, when
//   - the term is lost (lease expired or revoked, key deleted, partition);
//   - the runner dies (kill -9): the keeper sees its pipe close;
//   - the runner is paused (SIGSTOP, a stuck VM thread) past the deadline:
//     the keeper is not paused with it and kills on its own.
//
// The session's safety margin is --grace plus the library's default margin,
// so the SIGKILL lands before etcd can expire the lease and elect another
// replica; singleton refuses a --grace too long for --ttl. A new term starts
// its command only once no process of the previous group is left: on this
// machine, the keeper waits for the group to empty; across machines, the
// leader records its term under leasehold/NAME#singleton and the next leader
// waits until that record is removed (its command is dead) or its lease is
// gone for a full TTL (a lease revoked by an operator expires nothing on the
// old machine, so its deadline may still run that long).
//
// Limits, stated plainly: a process that leaves the command's process group
// (setsid, a daemon that double-forks) is not tracked. A process stuck in
// the kernel (uninterruptible I/O) dies when the kernel lets it. If the
// whole machine or VM is frozen, the keeper is frozen too: the command may
// run on when the machine resumes, after another replica started its own,
// until the keeper's timer fires. That is what LEASEHOLD_TOKEN is for:
// fence the command's writes (guard.Txn, gate.Gate). Failover after a
// runner crash takes up to two TTLs (the lease expires, then the record's
// lease is waited out). Linux gets all of the above; other Unix systems
// lack the parent-death signal and the child subreaper, so a keeper killed
// with SIGKILL leaves its command running.
//
// Connection flags (--endpoints, --cacert, --cert, --key, --user,
// --password, --dial-timeout) and their ETCDCTL_* variables work as for
// etcdctl. The command's stdin is /dev/null. Logs go to stderr; -v adds
// debug detail. Exit status: 0 when the command succeeded or singleton was
// interrupted, 1 when etcd cannot be reached, 2 for a bad command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/examples/internal/connect"
	"github.com/leasehold/leasehold/examples/internal/program"
	"github.com/leasehold/leasehold/fencing"
)

func main() {
	if os.Getenv(keeperEnv) != "" {
		os.Exit(keeperMain(os.Args[1:]))
	}
	program.Main(run)
}

type config struct {
	conn       connect.Config
	name       string
	group      string   // --group: run one command per name of names, balanced
	permits    int      // --permits: up to this many copies of the command at once; 0: one, under an election
	permitsSet bool     // --permits was given: 0 is then a mistake
	names      []string // --names, split
	ttl        time.Duration
	grace      time.Duration
	argv       []string
}

const usage = `usage: singleton --name NAME [--permits N] [--ttl D] [--grace D] [connection flags] [-v] -- command [args...]
       singleton --group GROUP --names N1,N2,... [--ttl D] [--grace D] [connection flags] [-v] -- command [args...]`

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := program.Flags("singleton", stderr, &c.conn, "127.0.0.1:2379", usage)
	fs.StringVar(&c.name, "name", "", "election name (required, unless --group)")
	fs.StringVar(&c.group, "group", "", "run one command per name of --names, each on one replica of the group, balanced")
	names := fs.String("names", "", "with --group: the names, comma-separated")
	fs.IntVar(&c.permits, "permits", 0, "run at most this many copies of the command at once, across replicas (a semaphore); unset: one, under an election")
	fs.DurationVar(&c.ttl, "ttl", 20*time.Second, "lease TTL: how long a crashed replica blocks the others")
	fs.DurationVar(&c.grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when the term ends")
	err := program.Parse(fs, args, func(argv []string) error {
		c.argv = argv
		fs.Visit(func(f *flag.Flag) { c.permitsSet = c.permitsSet || f.Name == "permits" })
		if *names != "" {
			c.names = strings.Split(*names, ",")
		}
		return c.check()
	})
	return c, err
}

// check validates the command line once parsed.
func (c *config) check() error {
	switch {
	case c.name == "" && c.group == "":
		return errors.New("--name (or --group) is required")
	case c.name != "" && c.group != "":
		return errors.New("give --name or --group, not both")
	case c.group != "" && len(c.names) == 0:
		return errors.New("--group needs --names")
	case c.group == "" && len(c.names) > 0:
		return errors.New("--names needs --group")
	case c.permits < 0 || c.permits == 0 && c.permitsSet:
		return fmt.Errorf("--permits %d: want 1 or more", c.permits)
	case c.permits > 0 && c.group != "":
		return errors.New("--permits does not go with --group: each name of a group runs one copy")
	case len(c.argv) == 0:
		return errors.New("no command: give it after --")
	case c.ttl < fencing.MinTTL:
		return fmt.Errorf("--ttl %v: the minimum is %v", c.ttl, fencing.MinTTL)
	case c.grace <= 0:
		return fmt.Errorf("--grace %v: want a positive duration", c.grace)
	}
	if _, err := c.margin(); err != nil {
		return err
	}
	if err := c.validateNames(); err != nil {
		return err
	}
	return c.conn.Validate()
}

// validateNames checks --name, or --group and each of --names.
func (c config) validateNames() error {
	if c.group == "" {
		if err := fencing.ValidateName(c.name); err != nil {
			return fmt.Errorf("--name: %w", err)
		}
		return nil
	}
	if err := fencing.ValidateName(c.group); err != nil {
		return fmt.Errorf("--group: %w", err)
	}
	seen := map[string]bool{}
	for _, n := range c.names {
		if err := fencing.ValidateName(n); err != nil {
			return fmt.Errorf("--names: %w", err)
		}
		if seen[n] {
			return fmt.Errorf("--names: %q twice", n)
		}
		seen[n] = true
	}
	return nil
}

// baseMargin is the library's default safety margin for a TTL (see
// fencing.WithSafetyMargin): what absorbs timer and scheduling slack.
func baseMargin(ttl time.Duration) time.Duration { return max(ttl/10, 500*time.Millisecond) }

// margin returns the session's safety margin: the base margin plus grace,
// so the command is SIGKILLed before etcd can expire the lease. The library
// needs the margin below half the TTL.
func (c config) margin() (time.Duration, error) {
	ttl := c.ttl.Round(time.Second)
	if ttl < c.ttl {
		ttl += time.Second // etcd grants whole seconds, rounded up
	}
	m := baseMargin(ttl) + c.grace
	if m < ttl/2 {
		return m, nil
	}
	need := ttl
	for baseMargin(need)+c.grace >= need/2 {
		need += time.Second
	}
	return 0, fmt.Errorf("--grace %v is too long for --ttl %v: the command must be killed before etcd can expire "+
		"the lease, so grace plus the library's margin, max(TTL/10, 500ms), must stay under half the TTL; "+
		"use --ttl %v or more, or a shorter --grace", c.grace, c.ttl, need)
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, _, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		err = fmt.Errorf("%w\n%s", err, usage)
	}
	if err != nil {
		return program.Exit("singleton", stderr, err)
	}
	log := c.conn.Logger(stderr)
	if c.group == "" {
		log = log.With("election", c.name)
	}
	cli, err := c.conn.Dial(ctx)
	if err != nil {
		return program.Exit("singleton", stderr, err)
	}
	defer cli.Close()
	r, err := newRunner(cli, c, log)
	if err != nil {
		return program.Exit("singleton", stderr, err)
	}
	margin, _ := c.margin()
	session := []fencing.SessionOption{fencing.WithTTL(c.ttl), fencing.WithSafetyMargin(margin),
		fencing.WithIdentity(r.identity), fencing.WithLogger(log)}
	if err := r.sameMode(ctx); err != nil {
		fmt.Fprintln(stderr, "singleton:", err)
		return 1
	}
	if c.permits > 0 {
		log.Info("waiting for a permit", "permits", c.permits, "ttl", c.ttl, "grace", c.grace, "margin", margin)
		if err := r.permits(ctx, session...); err != nil {
			fmt.Fprintln(stderr, "singleton:", err)
			return 1
		}
		return 0
	}
	log.Info("campaigning", "ttl", c.ttl, "grace", c.grace, "margin", margin)
	opts := []election.RunOption{
		election.WithSessionOptions(session...),
		election.OnStartedLeading(func(t *election.Term) { log.Info("leading", "token", t.Token()) }),
		election.OnStoppedLeading(func(t *election.Term, cause error) {
			log.Info("stopped leading", "token", t.Token(), "cause", cause)
		}),
	}
	if c.group != "" {
		err = election.RunGroup(ctx, cli, c.group, c.names, r.term, opts...)
	} else {
		err = election.Run(ctx, cli, c.name, r.identity, r.term, opts...)
	}
	if err != nil {
		fmt.Fprintln(stderr, "singleton:", err)
		return 1
	}
	return 0
}
