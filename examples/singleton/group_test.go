package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/examples/internal/progtest"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var groupNames = []string{"a", "b", "c", "d"}

// groupReplica starts one singleton of group g over groupNames, running job
// with one stamps file per name in dir.
func groupReplica(t *testing.T, c *fencingtest.Cluster, dir string) *progtest.Prog {
	args := append(append(append([]string{"--group", "g", "--names", strings.Join(groupNames, ","), "-v"}, tlsFlags(c)...), timing...),
		"--", "sh", "-c", `STAMPS="$STAMPDIR/$LEASEHOLD_NAME"`+job)
	return progtest.Start(t, []string{"STAMPDIR=" + dir}, args...)
}

// waitLeading waits until each replica leads as many names as want says,
// as etcd tells (a leader key's value ends with its runner's pid), and the
// command of every name runs.
func waitLeading(t *testing.T, c *fencingtest.Cluster, dir string, want map[*progtest.Prog]int) {
	t.Helper()
	got := map[int]int{}
	fencingtest.WaitFor(t, time.Minute, fmt.Sprint("names led ", want), func() bool {
		got = map[int]int{}
		for _, n := range groupNames {
			resp, err := c.Admin.Get(t.Context(), "leasehold/"+n+"#election/", clientv3.WithFirstCreate()...)
			if err != nil || len(resp.Kvs) == 0 {
				return false
			}
			v := string(resp.Kvs[0].Value)
			pid, _ := strconv.Atoi(v[strings.LastIndex(v, "/")+1:])
			got[pid]++
			if ss := readStamps(t, filepath.Join(dir, n)); len(ss) == 0 || ss[len(ss)-1].kind != "start" {
				return false
			}
		}
		for p, n := range want {
			if got[p.Pid()] != n {
				return false
			}
		}
		return true
	})
}

// --group: two replicas split four names two and two, each name's command
// running once; one that exits hands its names to the other at once, and no
// name's commands ever overlap.
func TestGroupSplitsNames(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	dir := t.TempDir()
	for _, n := range groupNames {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p1 := groupReplica(t, c, dir)
	waitLeading(t, c, dir, map[*progtest.Prog]int{p1: 4})
	p2 := groupReplica(t, c, dir)
	waitLeading(t, c, dir, map[*progtest.Prog]int{p1: 2, p2: 2})
	p1.Signal(t, syscall.SIGTERM)
	if code := p1.Wait(t, time.Minute); code != 0 {
		t.Fatalf("exit status %d\n%s", code, p1.Stderr())
	}
	waitLeading(t, c, dir, map[*progtest.Prog]int{p2: 4})
	if !strings.Contains(p1.Stderr(), "rebalanced") {
		t.Errorf("p1 did not log the handoff to p2:\n%s", p1.Stderr())
	}
	p2.Signal(t, syscall.SIGTERM)
	if code := p2.Wait(t, time.Minute); code != 0 {
		t.Fatalf("exit status %d\n%s", code, p2.Stderr())
	}
	for _, n := range groupNames {
		t.Run(n, func(t *testing.T) { checkOneAtATime(t, filepath.Join(dir, n)) })
	}
	noKeysLeft(t, c)
}
