package fencingtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/testbed/kit"
)

// writerEnv, set in a frozen writer's process, holds its brief as JSON: the
// process runs the test binary filtered to the case the brief names, and
// there plays the writer instead of the case.
const writerEnv = "LEASEHOLD_FENCE_WRITER"

// writerSays starts each line of the frozen writer's side of the protocol,
// among its test output: "paused TOKEN" once it holds the lock, checked it,
// and waits for "resume" on its stdin; "wrote ok", "wrote stale: ERR" or
// "wrote error: ERR" once its Write returned.
const writerSays = "fencingtest frozen writer:"

// writerBrief is what the frozen writer's process is told.
type writerBrief struct {
	Test      string   `json:"test"`      // the case's full name, as t.Name() says it
	Endpoints []string `json:"endpoints"` // the etcd cluster's
	Addr      string   `json:"addr"`      // the store's, from create
	Name      string   `json:"name"`      // the lock, and the name its writes are fenced under
}

// 6. A writer frozen after it checked its lock, in another process: it
// locks a real lock, confirms it owns it with a txn, says so and is stopped
// (SIGSTOP). Its lease is revoked; the test locks the lock, with a greater
// token, and writes through the fence; the writer is resumed and writes with
// its old token: refused with ErrStaleToken, the successor's value and mark
// left. With SetPause, the writer stops inside Write instead, where it pauses.
func frozenWriter(t *testing.T, create func(*testing.T) string, open func(*testing.T, string) Fence) {
	if b, ok := writerRole(t); ok {
		playWriter(t, b, open)
		return
	}
	if create == nil {
		t.Skip("fencingtest: create is nil, so no other process can reach the store: no frozen writer")
	}
	addr := create(t)
	s := newSubject(t, open(t, addr))
	c := Single(t)
	b := writerBrief{Test: t.Name(), Endpoints: c.Endpoints(), Addr: addr, Name: s.name("frozen")}
	w := startWriter(t, b)
	said, old := w.expect(t, "paused", "wrote")
	if said == "wrote" {
		t.Fatalf("fencingtest: the fence has SetPause, but the frozen writer's Write returned without calling pause (%s)", old)
	}
	w.p.Stop(t) // between its check and its write
	c.RevokeOwner(t, fencing.KindLock, b.Name)
	successor := Lock(t, Session(t, c.Client(t)), b.Name).Token()
	s.admit(successor, "successor")
	w.p.Send(t, "resume") // read once it runs again
	w.p.Cont(t)
	if _, verdict := w.expect(t, "wrote"); !strings.HasPrefix(verdict, "stale") {
		t.Errorf("fencingtest: the frozen writer's Write with %s, resumed after its successor's with %v, says %s; want an error wrapping fencing.ErrStaleToken",
			old, successor, verdict)
	}
	s.holds(b.Name, successor, "successor", "the frozen writer's write")
	w.exited(t)
}

// writerRole reports whether this process is a frozen writer for t, and its
// brief.
func writerRole(t *testing.T) (writerBrief, bool) {
	v := os.Getenv(writerEnv)
	if v == "" {
		return writerBrief{}, false
	}
	var b writerBrief
	if err := json.Unmarshal([]byte(v), &b); err != nil {
		t.Fatalf("fencingtest: %s: %v", writerEnv, err)
	}
	if b.Test != t.Name() {
		t.Skipf("fencingtest: this process is the frozen writer of %s", b.Test)
	}
	return b, true
}

// playWriter is the frozen writer: it locks b.Name, checks that it owns it,
// pauses until the test resumes it, and writes with its token.
func playWriter(t *testing.T, b writerBrief, open func(*testing.T, string) Fence) {
	f := open(t, b.Addr)
	if f == nil {
		t.Fatal("fencingtest: FenceConformance: open returned a nil Fence")
	}
	cli := NewClient(t, b.Endpoints)
	h := Lock(t, Session(t, cli), b.Name)
	ctx := Context(t, Wait)
	if resp, err := cli.Txn(ctx).If(h.IsOwner()).Commit(); err != nil || !resp.Succeeded {
		t.Fatalf("fencingtest: the frozen writer does not own %q after Lock: %v", b.Name, err)
	}
	stdin := bufio.NewReader(os.Stdin)
	var once sync.Once
	pause := func() {
		once.Do(func() {
			fmt.Println(writerSays, "paused", h.Token())
			if line, err := stdin.ReadString('\n'); strings.TrimSpace(line) != "resume" {
				t.Errorf("fencingtest: the frozen writer read %q (%v) from the test; want resume", line, err)
			}
		})
	}
	if p, ok := f.(pausable); ok {
		p.SetPause(pause)
	} else {
		pause()
	}
	err := subject{t: t, f: f}.write(ctx, h.Token(), "frozen writer")
	fmt.Println(writerSays, "wrote", verdict(err))
}

// verdict is the frozen writer's outcome on one line.
func verdict(err error) string {
	var v string
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fencing.ErrStaleToken):
		v = "stale: " + err.Error()
	default:
		v = "error: " + err.Error()
	}
	return strings.ReplaceAll(v, "\n", " ")
}

// writerProc is the frozen writer's process, with the lines it printed so
// far, for failure messages.
type writerProc struct {
	p    *Proc
	seen []string
}

// startWriter runs the test binary again, filtered to b.Test, as the frozen
// writer of b.
func startWriter(t *testing.T, b writerBrief) *writerProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("fencingtest: frozen writer: %v", err)
	}
	brief, err := json.Marshal(b)
	if err != nil {
		t.Fatalf("fencingtest: frozen writer: %v", err)
	}
	cmd := exec.Command(exe, "-test.run="+runPattern(b.Test), "-test.count=1", "-test.v", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), writerEnv+"="+string(brief))
	kit.SetDeathSignal(cmd)
	return &writerProc{p: startProc(t, cmd, "frozen writer")}
}

// runPattern is the -test.run pattern that matches the test named name
// (t.Name()) and nothing else: each element quoted and anchored.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// expect waits up to Wait for the writer to say one of words, and returns
// the word and the rest of the line.
func (w *writerProc) expect(t *testing.T, words ...string) (word, rest string) {
	t.Helper()
	timeout := time.After(Wait)
	for {
		select {
		case line, ok := <-w.p.Lines():
			if !ok {
				t.Fatalf("fencingtest: the frozen writer exited before it said %s; its output:\n%s", strings.Join(words, " or "), w.transcript())
			}
			w.seen = append(w.seen, line)
			_, said, ours := strings.Cut(line, writerSays+" ")
			for _, word := range words {
				if rest, ok := strings.CutPrefix(said, word); ours && ok {
					return word, strings.TrimSpace(rest)
				}
			}
		case <-timeout:
			t.Fatalf("fencingtest: the frozen writer did not say %s within %v; its output:\n%s", strings.Join(words, " or "), Wait, w.transcript())
		}
	}
}

// exited closes the writer's stdin, waits up to Wait for it to exit, and
// fails t if it failed (its test, or Main's leak check).
func (w *writerProc) exited(t *testing.T) {
	t.Helper()
	w.p.Close()
	timeout := time.After(Wait)
	for lines := w.p.Lines(); lines != nil; {
		select {
		case line, ok := <-lines:
			if ok {
				w.seen = append(w.seen, line)
			} else {
				lines = nil
			}
		case <-timeout:
			t.Fatalf("fencingtest: the frozen writer had not exited %v after its write; its output:\n%s", Wait, w.transcript())
		}
	}
	select {
	case <-w.p.Exited():
	case <-timeout:
		t.Fatalf("fencingtest: the frozen writer had not exited %v after its write; its output:\n%s", Wait, w.transcript())
	}
	if code := w.p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("fencingtest: the frozen writer's process exited with status %d; its output:\n%s", code, w.transcript())
	}
}

// transcript is the last lines the writer printed, indented.
func (w *writerProc) transcript() string {
	seen := w.seen[max(0, len(w.seen)-60):]
	return "\t" + strings.Join(seen, "\n\t")
}
