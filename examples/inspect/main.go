// Command inspect shows who holds each lock, semaphore permit or read-write
// lock, or leads each election, and who waits, as read from etcd: the
// holders first, then the waiters in the order they will hold, with each
// one's identity, lease and lease time left. A semaphore's line gives its
// limit, permits in use and waiters; a read-write lock's, the readers in
// (or the writer) and the waiters, each row saying reader or writer.
//
//	inspect --endpoints https://etcd-0:2379 --cacert ca.pem --cert me.pem --key me-key.pem jobs/billing
//	inspect --endpoints 127.0.0.1:2379 --kind election leader-example
//	inspect --endpoints 127.0.0.1:2379 --kind semaphore migrations
//	inspect --endpoints 127.0.0.1:2379 --prefix jobs/ -o json
//	inspect --endpoints 127.0.0.1:2379 --watch jobs/billing
//	inspect --endpoints 127.0.0.1:2379 --group jobs [--watch] [-o json]
//	inspect --explain --ttl 10s
//
// --group shows an election.RunGroup group instead of queues: a line with
// its replicas, names, cap (the most names a replica leads once balanced)
// and how many names are misplaced (not led by the replica the group
// assigns them to; 0 once balanced), then one row per replica (identity,
// lease, names it leads, is assigned, lists, has declined) in the order
// they joined, and one row per name (the replica assigned, the leader, the
// leader's token revision; "-" when nobody leads). It goes with neither
// NAME, --prefix nor --kind.
//
// --watch redraws on every change of the keys (and every second, for the
// TTLs); with --group, on every change under --root, since a group's names
// may be anywhere under it. A failed redraw is shown in the table, or
// logged on stderr with -o json. -o json prints the queues (or the group)
// as JSON, one document per line (per redraw): snake_case keys, tokens as
// {"name","revision"}, leases in hex as in the table and etcdctl,
// durations in nanoseconds (the _ns keys).
// --root is the key prefix the services pass to fencing.WithRoot (default
// "leasehold/"). --timeout bounds each read of etcd. --explain prints the safety budget of
// a TTL and margin: how long a crashed holder blocks its successor, how long
// a partitioned one works on.
//
// Connection flags (--endpoints, --cacert, --cert, --key, --user,
// --password, --dial-timeout) and their ETCDCTL_* variables work as for
// etcdctl; a cluster that cannot be reached fails within --dial-timeout,
// naming each endpoint and why. When NAME is free as the kind asked for
// (lock, unless --kind) but held or led as the other kind, inspect says so
// on stderr ("no lock named X; an election named X has a leader (...): use
// --kind election"), and likewise for a semaphore or read-write lock. -v logs debug detail on stderr. Exit status: 0; 1 when
// etcd cannot be reached or read; 2 for a bad command line; --help exits 0.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/examples/internal/connect"
	"github.com/leasehold/leasehold/examples/internal/program"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() { program.Main(run) }

type config struct {
	conn                 connect.Config
	kind, prefix, output string
	root, group          string
	watch, explain       bool
	ttl, margin, timeout time.Duration
	name                 string
}

const howToConnect = `inspect needs etcd's endpoints: pass --endpoints, or set ETCDCTL_ENDPOINTS.
  inspect --endpoints 127.0.0.1:2379 NAME
  inspect --endpoints https://etcd-0:2379,https://etcd-1:2379 --cacert ca.pem --cert me.pem --key me-key.pem NAME
  inspect --endpoints 127.0.0.1:2379 --prefix ""      (every lock and election)
The endpoints are the ones your services pass to clientv3 (etcdctl member list shows them).`

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := program.Flags("inspect", stderr, &c.conn, "",
		"usage: inspect [--endpoints E] [TLS flags] [--kind K] [-o table|json] [--watch] NAME | --prefix P",
		"       inspect [--endpoints E] [TLS flags] [-o table|json] [--watch] --group G",
		"       inspect --explain [--ttl D] [--margin D]")
	fs.StringVar(&c.kind, "kind", "", `"lock", "election", "semaphore" or "rwlock"; unset: lock for NAME, all for --prefix`)
	fs.StringVar(&c.prefix, "prefix", "", "show every queue whose name starts with this, instead of NAME")
	fs.StringVar(&c.group, "group", "", "show this election.RunGroup group's replicas and names, instead of NAME")
	fs.StringVar(&c.root, "root", fencing.DefaultRoot, "the key prefix the services pass to fencing.WithRoot")
	fs.StringVar(&c.output, "o", "table", `output format: "table" or "json"`)
	fs.BoolVar(&c.watch, "watch", false, "redraw on every change until interrupted")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long one read of etcd may take")
	fs.BoolVar(&c.explain, "explain", false, "print the safety budget of --ttl and --margin, and exit")
	fs.DurationVar(&c.ttl, "ttl", fencing.DefaultTTL, "lease TTL, for --explain")
	fs.DurationVar(&c.margin, "margin", 0, "safety margin, for --explain; unset: the library's default")
	err := program.Parse(fs, args, func(rest []string) error {
		names, err := parseInterspersed(fs, rest)
		if err != nil {
			return err
		}
		return c.check(fs, names)
	})
	return c, err
}

// check validates the command line once parsed, and sets name and kind.
func (c *config) check(fs *flag.FlagSet, names []string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case c.explain:
		return nil
	case len(names)+count(set["prefix"])+count(set["group"]) != 1:
		fs.Usage()
		return errors.New("give one NAME, --prefix or --group")
	case set["group"] && set["kind"]:
		return errors.New("--kind does not go with --group: a group's names are elections")
	case c.output != "table" && c.output != "json":
		return fmt.Errorf("-o %q: want table or json", c.output)
	case c.kind != "" && !slices.Contains(kinds, fencing.Kind(c.kind)):
		return fmt.Errorf("--kind %q: want lock, election, semaphore or rwlock", c.kind)
	case c.conn.Endpoints == "":
		return fmt.Errorf("no endpoints\n%s", howToConnect)
	}
	if err := c.conn.Validate(); err != nil {
		return err
	}
	if _, err := inspect.SubtreePrefix(c.root, c.prefix); err != nil {
		return fmt.Errorf("--root %q, --prefix %q: %w", c.root, c.prefix, err)
	}
	if set["group"] {
		if err := fencing.ValidateName(c.group); err != nil {
			return fmt.Errorf("--group %q: %w", c.group, err)
		}
	}
	if len(names) == 1 {
		c.name = names[0]
		if err := fencing.ValidateName(c.name); err != nil {
			return err
		}
		if c.kind == "" {
			c.kind = string(fencing.KindLock)
		}
	}
	return nil
}

// kinds are the kinds of queue --kind names.
var kinds = []fencing.Kind{fencing.KindLock, fencing.KindElection, fencing.KindSemaphore, fencing.KindRWLock}

// count is 1 for true, 0 for false.
func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseInterspersed parses flags given before or after the positional
// arguments ("inspect NAME --watch"), and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return names, nil
		}
		names, args = append(names, fs.Arg(0)), fs.Args()[1:]
	}
}

// run is the command, returning its exit status: 0, 1 for a failure to
// read etcd, 2 for a bad command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if err != nil {
		return program.Exit("inspect", stderr, err)
	}
	if c.explain {
		return explain(c, stdout, stderr)
	}
	cli, err := c.conn.Dial(ctx)
	if err != nil {
		return program.Exit("inspect", stderr, err)
	}
	defer cli.Close()
	s := newScreen(stdout, c.output, c.conn.Logger(stderr))
	if c.watch {
		err = watch(ctx, cli, c, s)
	} else {
		err = once(ctx, cli, c, s, stderr)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(stderr, "inspect:", err)
		if errors.Is(err, fencing.ErrInvalidArgument) || errors.Is(err, fencing.ErrInvalidName) {
			return 2
		}
		return 1
	}
	return 0
}

// explain prints the budget of the session NewSession would make with
// WithTTL(c.ttl) and WithSafetyMargin(c.margin), and refuses what it would.
func explain(c config, stdout, stderr io.Writer) int {
	if c.ttl < fencing.MinTTL {
		fmt.Fprintf(stderr, "inspect: --ttl %v is below the minimum, %v\n", c.ttl, fencing.MinTTL)
		return 2
	}
	ttl := (c.ttl + time.Second - 1).Truncate(time.Second) // etcd grants whole seconds
	margin := c.margin
	if margin == 0 {
		margin = max(ttl/10, 500*time.Millisecond) // fencing's default
	}
	if margin >= ttl/2 {
		fmt.Fprintf(stderr, "inspect: --margin %v: must be below half the TTL, %v\n", margin, ttl/2)
		return 2
	}
	b, err := inspect.SafetyBudget(ttl, ttl/3, margin)
	if err != nil {
		fmt.Fprintln(stderr, "inspect:", err)
		return 2
	}
	fmt.Fprint(stdout, b)
	return 0
}

// once shows the queues once. When NAME is free as the kind asked for but
// has a queue as the other kind, it says so on stderr: a lock and an
// election of one name are different things, and "free" alone misleads.
func once(ctx context.Context, cli *clientv3.Client, c config, s *screen, stderr io.Writer) error {
	if c.group != "" {
		return show(ctx, cli, c, s)
	}
	qs, err := read(ctx, cli, c)
	if err != nil {
		return err
	}
	if err := s.draw(qs, time.Now()); err != nil {
		return err
	}
	if c.name != "" && len(qs) == 1 && len(qs[0].Entries) == 0 {
		hintOtherKind(ctx, cli, c, stderr)
	}
	return nil
}

// hintOtherKind prints, for a NAME free as c.kind, who holds or leads it
// as another kind, if anyone: "no lock named X; an election named X has a
// leader ("v"): use --kind election". It is only a hint: a failed read
// prints nothing.
func hintOtherKind(ctx context.Context, cli *clientv3.Client, c config, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	for _, other := range kinds {
		if other == fencing.Kind(c.kind) {
			continue
		}
		q, err := inspect.Read(ctx, cli, c.root, other, c.name)
		owner, ok := q.Owner()
		if err != nil || !ok {
			continue
		}
		has := map[fencing.Kind]string{
			fencing.KindLock:      "a lock named %q is held (by %s)",
			fencing.KindElection:  "an election named %q has a leader (%s)",
			fencing.KindSemaphore: "a semaphore named %q is held (by %s, first)",
			fencing.KindRWLock:    "a read-write lock named %q is held (by %s, first)",
		}[other]
		fmt.Fprintf(stderr, "inspect: no %s named %q; "+has+": use --kind %s\n", c.kind, c.name, c.name, printable(owner.Value), other)
		return
	}
}

// shown is a queue as the program shows it: an election's with its ranked
// candidates (read just after the queue, at a revision of their own).
type shown struct {
	inspect.Queue
	Candidates []election.Candidate `json:"candidates,omitempty"`
}

// read returns the queues the command line asks for.
func read(ctx context.Context, cli *clientv3.Client, c config) ([]shown, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if c.name != "" {
		q, err := inspect.Read(ctx, cli, c.root, fencing.Kind(c.kind), c.name)
		if err != nil || q.Kind != fencing.KindElection {
			return []shown{{Queue: q}}, err
		}
		cs, err := election.ReadCandidates(ctx, cli, c.root, c.name)
		return []shown{{Queue: q, Candidates: cs}}, err
	}
	qs, err := inspect.ReadPrefix(ctx, cli, c.root, fencing.Kind(c.kind), c.prefix)
	if err != nil {
		return nil, err
	}
	var cands map[string][]election.Candidate
	if c.kind == "" || fencing.Kind(c.kind) == fencing.KindElection {
		if cands, err = election.ReadCandidatesUnder(ctx, cli, c.root, c.prefix); err != nil {
			return nil, err
		}
	}
	return withCandidates(qs, cands), nil
}

// withCandidates puts each election's candidates beside its queue, and lists
// an election that has candidates and no key queued as a free queue.
func withCandidates(qs []inspect.Queue, cands map[string][]election.Candidate) []shown {
	out := make([]shown, 0, len(qs))
	for _, q := range qs {
		s := shown{Queue: q}
		if q.Kind == fencing.KindElection {
			s.Candidates = cands[q.Name]
			delete(cands, q.Name)
		}
		out = append(out, s)
	}
	for _, name := range slices.Sorted(maps.Keys(cands)) {
		out = append(out, shown{Queue: inspect.Queue{Kind: fencing.KindElection, Name: name, Entries: []inspect.Entry{}},
			Candidates: cands[name]})
	}
	slices.SortStableFunc(out, func(a, b shown) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name)) })
	return out
}

// keyRange is the etcd key prefix of what the command line asks for: for a
// group, the whole root, since the elections of its names may be anywhere
// under it.
func keyRange(c config) (string, error) {
	if c.group != "" {
		return inspect.SubtreePrefix(c.root, "")
	}
	if c.name == "" {
		return inspect.SubtreePrefix(c.root, c.prefix)
	}
	return inspect.KeyPrefix(c.root, fencing.Kind(c.kind), c.name)
}

// show reads and draws what the command line asks for.
func show(ctx context.Context, cli *clientv3.Client, c config, s *screen) error {
	if c.group != "" {
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		g, err := election.ReadGroup(rctx, cli, c.root, c.group)
		if err != nil {
			return err
		}
		return s.drawGroup(g, time.Now())
	}
	qs, err := read(ctx, cli, c)
	if err != nil {
		return err
	}
	return s.draw(qs, time.Now())
}

// minRedraw spaces redraws: a busy lock changes faster than anyone reads,
// and each redraw reads every key and lease.
const minRedraw = 250 * time.Millisecond

// watch redraws whenever a key under the inspected range changes (at most
// every minRedraw), and every second for the TTLs. A broken watch
// (compaction, a lost member) is made again: the next redraw reads
// everything afresh anyway.
func watch(ctx context.Context, cli *clientv3.Client, c config, s *screen) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	keys, err := keyRange(c)
	if err != nil {
		return err
	}
	var events clientv3.WatchChan
	for {
		if events == nil {
			events = cli.Watch(clientv3.WithRequireLeader(ctx), keys, clientv3.WithPrefix())
		}
		drawn := time.Now()
		if err := show(ctx, cli, c, s); err != nil && ctx.Err() == nil {
			s.problem(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case resp, ok := <-events:
			if !ok || resp.Err() != nil {
				s.log.Debug("watch broken; making it again", "err", resp.Err())
				events = nil // made again after the next tick: no busy loop while etcd is away
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
			}
			// Let the changes of the next moment pile up into one redraw.
			if !pause(ctx, time.Until(drawn.Add(minRedraw))) {
				return nil
			}
			drain(events)
		case <-tick.C:
		}
	}
}

// pause waits for d, or returns false when ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// drain discards the events already received: the redraw reads them all.
func drain(events clientv3.WatchChan) {
	for {
		select {
		case resp, ok := <-events:
			if !ok || resp.Err() != nil {
				return // broken: the loop sees it on its next receive, as the channel closes
			}
		default:
			return
		}
	}
}
