package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/examples/internal/progtest"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { progtest.Main(m, main) }

// hang bounds every wait: far above what the step needs, so it only catches
// a hang.
const hang = 30 * time.Second

var httpClient = &http.Client{Timeout: 5 * time.Second}

// startReplica runs a replica of election name in this process until the
// test ends; obs receives its sessions' events.
func startReplica(t *testing.T, cli *clientv3.Client, name, value string, obs fencing.Observer) (*replica, string) {
	t.Helper()
	r := newReplica(name, value, fencing.MinTTL, slog.New(slog.DiscardHandler))
	srv := httptest.NewServer(r)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx, cli, obs)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	return r, srv.URL
}

func getLeader(t *testing.T, base string) (int, leaderJSON) {
	t.Helper()
	resp, err := httpClient.Get(base + "/leader")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l leaderJSON
	json.NewDecoder(resp.Body).Decode(&l)
	return resp.StatusCode, l
}

func healthz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, base, path string) int {
	t.Helper()
	resp, err := httpClient.Post(base+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// leads waits until base reports itself as leader with a token other than
// not, and returns that token.
func leads(t *testing.T, base, not string) string {
	t.Helper()
	var tok string
	fencingtest.WaitFor(t, hang, base+" to lead", func() bool {
		code, l := getLeader(t, base)
		tok = l.Token
		return code == http.StatusOK && l.Self && l.Token != not
	})
	return tok
}

// Two replicas agree on the leader; the leader's resign hands over; only the
// leader may proclaim, and the new value is what both report.
func TestReplicas(t *testing.T) {
	c := fencingtest.Single(t)
	_, a := startReplica(t, c.Client(t), "test", "a", fencing.Observer{})
	_, b := startReplica(t, c.Client(t), "test", "b", fencing.Observer{})
	var first leaderJSON
	fencingtest.WaitFor(t, hang, "both replicas to see one leader", func() bool {
		c0, l0 := getLeader(t, a)
		c1, l1 := getLeader(t, b)
		first = l0
		return c0 == 200 && c1 == 200 && l0.Token == l1.Token && l0.Self != l1.Self
	})
	lead, follow := a, b
	if first.Value == "b" {
		lead, follow = follow, lead
	}
	if code := post(t, follow, "/proclaim?value=x"); code != http.StatusConflict {
		t.Fatalf("follower proclaim: %d; want 409", code)
	}
	if code := post(t, lead, "/resign"); code != http.StatusOK {
		t.Fatalf("leader resign: %d", code)
	}
	leads(t, follow, first.Token)
	if code := post(t, follow, "/proclaim?value=b2"); code != http.StatusOK {
		t.Fatalf("new leader proclaim: %d", code)
	}
	fencingtest.WaitFor(t, hang, "the proclaimed value", func() bool {
		code, l := getLeader(t, lead)
		return code == 200 && l.Value == "b2" && !l.Self
	})
	for _, base := range []string{a, b} {
		if code, body := healthz(t, base); code != http.StatusOK {
			t.Fatalf("healthz of a replica in good standing: %d %s", code, body)
		}
	}
}

// A replica whose lease is revoked (its session lost) campaigns on a new
// session and leads again: it never leaves the election.
func TestLeadsAgainAfterLeaseRevoked(t *testing.T) {
	c := fencingtest.Single(t)
	r, base := startReplica(t, c.Client(t), "revoked", "a", fencing.Observer{})
	first := leads(t, base, "")
	var term *election.Term
	fencingtest.WaitFor(t, hang, "the replica to store its term", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		term = r.term
		return term != nil
	})
	c.Revoke(t, term.Session().Lease())
	leads(t, base, first)
	fencingtest.WaitFor(t, hang, "/healthz 200", func() bool {
		code, _ := healthz(t, base)
		return code == http.StatusOK
	})
}

// tlsArgs are the flags that reach c with the good certificates.
func tlsArgs(c *fencingtest.Cluster) []string {
	return []string{"--endpoints", c.Endpoints()[0], "--cacert", c.TLS.CA, "--cert", c.TLS.Cert, "--key", c.TLS.Key}
}

var servingRE = regexp.MustCompile(`msg=serving addr=(\S+)`)

// startProgram runs the leader program and returns it with its HTTP base URL.
func startProgram(t *testing.T, args ...string) (*progtest.Prog, string) {
	t.Helper()
	p := progtest.Start(t, nil, append(args, "--listen", "127.0.0.1:0", "--ttl", "2s")...)
	p.WaitStderr(t, hang, "msg=serving")
	m := servingRE.FindStringSubmatch(p.Stderr())
	if m == nil {
		t.Fatalf("no address in:\n%s", p.Stderr())
	}
	return p, "http://" + m[1]
}

// As a user runs it, on a TLS cluster: it leads, serves its metrics, and on
// SIGTERM resigns, leaving no key, and exits 0.
func TestProgramWithTLS(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	p, base := startProgram(t, tlsArgs(c)...)
	leads(t, base, "")
	if code, body := healthz(t, base); code != http.StatusOK {
		t.Fatalf("healthz: %d %s", code, body)
	}
	resp, err := httpClient.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	io.Copy(&metrics, resp.Body)
	resp.Body.Close()
	if want := `leasehold_owner{kind="election",name="leader-example"} 1`; !strings.Contains(metrics.String(), want) {
		t.Fatalf("/metrics lacks %s:\n%s", want, metrics.String())
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, hang); code != 0 {
		t.Fatalf("after SIGTERM: exit %d\n%s", code, p.Stderr())
	}
	if keys := etcdtest.Keys(t, c, "leasehold/"); len(keys) != 0 {
		t.Fatalf("keys left after SIGTERM: %q\n%s", keys, p.Stderr())
	}
}

// After a quorum loss (the only member stopped past the TTL) the replica's
// session is gone: /healthz says so. Once etcd is back, the replica
// campaigns on a new session, leads again, and /healthz is 200 again.
func TestProgramLeadsAgainAfterQuorumLoss(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	p, base := startProgram(t, tlsArgs(c)...)
	first := leads(t, base, "")
	c.Stop(0)
	fencingtest.WaitFor(t, hang, "/healthz 503 while etcd is down", func() bool {
		code, _ := healthz(t, base)
		return code == http.StatusServiceUnavailable
	})
	p.WaitStderr(t, hang, "session lost")
	c.Restart(t, 0)
	leads(t, base, first)
	fencingtest.WaitFor(t, hang, "/healthz 200 again", func() bool {
		code, _ := healthz(t, base)
		return code == http.StatusOK
	})
}

// A wrong CA or nothing listening fails within the dial timeout, naming the
// endpoint; --help exits 0; a bad command line exits 2.
func TestProgramFailsClearly(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	progtest.CheckConnectFailures(t, c, hang, nil, "--listen", "127.0.0.1:0")
	if code, _, stderr := progtest.Run(t, hang, nil, "--help"); code != 0 || !strings.Contains(stderr, "usage: leader") {
		t.Fatalf("--help: exit %d\n%s", code, stderr)
	}
	for _, args := range [][]string{{"--ttl", "1s"}, {"--name", ""}, {"--cert", "c.pem"}, {"--nonsense"}, {"extra"},
		{"--priority", "latest"}, {"--priority", "v1.5.0-rc.1"}} {
		if code := run(t.Context(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("leader %q: exit %d; want 2", args, code)
		}
	}
	code, _, stderr := progtest.Run(t, hang, nil, "--priority", "latest")
	if code != 2 || !strings.Contains(stderr, "--priority") {
		t.Fatalf("--priority latest: exit %d, want 2 naming the flag:\n%s", code, stderr)
	}
}

// The finding of issue 28, as a user tried it: the leader frozen past its
// TTL and resumed, the other takes over, the resumed one queues again and
// leads again after a resign, and both agree on GET /leader. While it leads
// on its new session, /healthz is 200: health follows the session Run
// campaigns on, not the renewal events of a session that is gone.
func TestProgramHealthyWhenLeadingAfterPause(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	p, a := startProgram(t, tlsArgs(c)...)
	first := leads(t, a, "")
	_, b := startProgram(t, tlsArgs(c)...)
	p.Signal(t, syscall.SIGSTOP)
	second := leads(t, b, first)
	p.Signal(t, syscall.SIGCONT)
	fencingtest.WaitFor(t, hang, "the resumed replica to queue again", func() bool {
		return len(c.Queue(t, fencing.KindElection, "leader-example").Entries) == 2
	})
	if code := post(t, b, "/resign"); code != http.StatusOK {
		t.Fatalf("resign: %d", code)
	}
	third := leads(t, a, second)
	var la, lb leaderJSON
	fencingtest.WaitFor(t, hang, "both replicas to report the resumed replica's term", func() bool {
		var ca, cb int
		ca, la = getLeader(t, a)
		cb, lb = getLeader(t, b)
		return ca == http.StatusOK && cb == http.StatusOK && la.Token == third && lb.Token == third
	})
	if !la.Self || lb.Self || la.Value != lb.Value {
		t.Fatalf("GET /leader: the resumed replica says %+v, the other %+v; want one leader, the resumed one", la, lb)
	}
	if code, body := healthz(t, a); code != http.StatusOK {
		t.Fatalf("healthz of the replica that leads again: %d %s", code, body)
	}
}

func request(t *testing.T, method, url string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// As an operator drains a replica before maintenance: POST /drain moves
// leadership off it and keeps it off (a /resign of the new leader hands
// nothing back); DELETE /drain makes it a candidate again.
func TestProgramDrain(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	_, a := startProgram(t, tlsArgs(c)...)
	first := leads(t, a, "")
	_, b := startProgram(t, tlsArgs(c)...)
	if code := post(t, a, "/drain"); code != http.StatusOK {
		t.Fatalf("drain: %d", code)
	}
	second := leads(t, b, first)
	if code := post(t, b, "/resign"); code != http.StatusOK {
		t.Fatalf("resign: %d", code)
	}
	leads(t, b, second) // the drained replica does not take it
	if code := request(t, http.MethodDelete, a+"/drain"); code != http.StatusOK {
		t.Fatalf("undrain: %d", code)
	}
	fencingtest.WaitFor(t, hang, "a to queue again", func() bool {
		return len(c.Queue(t, fencing.KindElection, "leader-example").Entries) == 2
	})
}

// A rolling upgrade as a user runs it: two replicas of v1.4.0, then one of
// v1.5.0 takes over at once; the old ones stopped, it keeps leading.
func TestProgramPriorityUpgrade(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	old1, a := startProgram(t, append(tlsArgs(c), "--priority", "v1.4.0")...)
	leads(t, a, "")
	old2, _ := startProgram(t, append(tlsArgs(c), "--priority", "v1.4.0")...)
	_, n := startProgram(t, append(tlsArgs(c), "--priority", "v1.5.0")...)
	tok := leads(t, n, "")
	// GET /leader lists the candidates from Observe: the new one alone preferred.
	fencingtest.WaitFor(t, hang, "GET /leader to list three candidates, v1.5.0 preferred", func() bool {
		_, l := getLeader(t, a)
		var got []string
		for _, c := range l.Candidates {
			got = append(got, fmt.Sprintf("%s %v", c.Priority, c.Preferred))
		}
		slices.Sort(got)
		return slices.Equal(got, []string{"1.4.0 false", "1.4.0 false", "1.5.0 true"})
	})
	old1.Signal(t, syscall.SIGTERM)
	old2.Signal(t, syscall.SIGTERM)
	old1.Wait(t, hang)
	old2.Wait(t, hang)
	if code, l := getLeader(t, n); code != http.StatusOK || !l.Self || l.Token != tok {
		t.Fatalf("after the old replicas stopped: %d %+v, want the new replica's term %s", code, l, tok)
	}
	if !strings.Contains(old1.Stderr(), "preempted") {
		t.Fatalf("the old leader does not log why it stopped leading:\n%s", old1.Stderr())
	}
}
