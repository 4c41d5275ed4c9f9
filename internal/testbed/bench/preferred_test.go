package bench_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkPreferredHandover measures how soon leadership reaches where it
// should, with election.Run on both sides:
//   - plain: the leader's Run ends while a plain replica waits in the queue:
//     from the cancel to the waiter's work starting (a plain handoff);
//   - replaced: the leader's Run ends as a new plain replica starts (a
//     rolling upgrade without priorities): from both to the new one's work;
//   - preferred: a replica of higher Priority starts while a lower one
//     leads: from its Run call (lease grant included) to its work starting,
//     the lower one giving way; session-p50-ms counts from its session's
//     grant instead (OnSession), as a plain handoff's waiter has its
//     session before the handoff starts.
//
// at-rest-req/s is the non-keepalive requests per second of the two
// replicas once the preferred one leads, over the second that starts 100 ms
// after its work: the watches send none. term-start-req is what they sent
// in those first 100 ms (a ranked leader reads and watches the queue).
func BenchmarkPreferredHandover(b *testing.B) {
	c := cluster(b)
	for _, mode := range []string{"plain", "replaced", "preferred"} {
		b.Run(mode, func(b *testing.B) {
			var lat, fromSession latencies
			ctr := &etcdtest.Counter{}
			cli := [2]*clientv3.Client{c.Client(b, etcdtest.WithCounter(ctr)), c.Client(b, etcdtest.WithCounter(ctr))}
			var termStart, atRest float64
			for i := range b.N {
				name := fmt.Sprintf("prefer-%s-%d", mode, i)
				var lowOpts, highOpts []election.RunOption
				if mode == "preferred" {
					lowOpts, highOpts = []election.RunOption{election.Priority(1)}, []election.RunOption{election.Priority(2)}
				}
				low := startRun(b, cli[0], name, lowOpts...)
				<-low.working
				var start, granted time.Time
				var high *run
				switch mode {
				case "plain":
					high = startRun(b, cli[1], name)
					waitQueued(b, c, name, 2)
					start = time.Now()
					low.stop()
				case "replaced":
					start = time.Now()
					high = startRun(b, cli[1], name)
					low.stop()
				case "preferred":
					start = time.Now()
					high = startRun(b, cli[1], name, append(highOpts, election.OnSession(func(*fencing.Session) {
						granted = time.Now() // before the replica campaigns: read after its work starts
					}))...)
				}
				<-high.working
				lat.add(time.Since(start))
				if mode == "preferred" {
					fromSession.add(time.Since(granted))
				}
				if i == b.N-1 {
					// The new term's first requests (a ranked leader's read and
					// watch of the queue) come within ms of its start; at rest
					// is the second after.
					count := func() int { return ctr.Requests("") - ctr.Requests("LeaseKeepAlive") }
					before := count()
					time.Sleep(100 * time.Millisecond)
					settled := count()
					time.Sleep(time.Second)
					termStart, atRest = float64(settled-before), float64(count()-settled)
				}
				low.stop()
				high.stop()
			}
			lat.report(b)
			if mode == "preferred" {
				fromSession.reportP50(b, "session-p50-ms")
			}
			b.ReportMetric(atRest, "at-rest-req/s")
			b.ReportMetric(termStart, "term-start-req")
		})
	}
}

// run is one election.Run replica whose work signals that it started and
// blocks until its context ends.
type run struct {
	working chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

func startRun(b *testing.B, cli *clientv3.Client, name string, opts ...election.RunOption) *run {
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{working: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	opts = append(opts, election.WithSessionOptions(fencing.WithTTL(10*time.Second)))
	go func() {
		defer close(r.done)
		err := election.Run(ctx, cli, name, "v", func(ctx context.Context, _ *election.Term) error {
			select {
			case r.working <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return nil
		}, opts...)
		if err != nil {
			b.Error(err)
		}
	}()
	return r
}

func (r *run) stop() {
	r.cancel()
	<-r.done
}

// waitQueued spins until the election name has n keys.
func waitQueued(b *testing.B, c *fencingtest.Cluster, name string, n int) {
	for len(c.Queue(b, fencing.KindElection, name).Entries) < n {
	}
}
