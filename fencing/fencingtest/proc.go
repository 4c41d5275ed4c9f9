package fencingtest

import (
	"bufio"
	"fmt"
	"github.com/leasehold/leasehold/internal/testbed/kit"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// helperEnv names the helper a re-executed test binary must run instead of
// its tests.
const helperEnv = "ETCDTEST_HELPER"

// HelperFunc is a program run in a subprocess by StartHelper. It receives
// the arguments given to StartHelper and returns the exit status. Its stdout
// is line-oriented: the test reads it with Proc.Expect. It should exit when
// its stdin closes, which happens when the test ends.
type HelperFunc func(args []string) int

var helpers = map[string]HelperFunc{}

// RegisterHelper makes f runnable as a subprocess under name. Call it from
// an init function or from TestMain before Main.
func RegisterHelper(name string, f HelperFunc) { helpers[name] = f }

// Main is the whole TestMain of a package that uses fencingtest: in a
// subprocess started by StartHelper it runs the helper and exits; otherwise
// it runs the tests and fails the run if any goroutine outlives them.
func Main(m *testing.M, opts ...goleak.Option) {
	if name := os.Getenv(helperEnv); name != "" {
		f, ok := helpers[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "fencingtest: no helper %q\n", name)
			os.Exit(2)
		}
		os.Exit(f(os.Args[1:]))
	}
	code := m.Run()
	atExit.Close()
	if code == 0 {
		if err := findLeaks(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// atExit holds the functions AtExit registers; Main closes it.
var atExit standalone

// AtExit registers f to run in Main once the tests have run, before the
// goroutine-leak check: functions run one at a time, the last registered
// first, including any registered while they run. It is safe for concurrent
// use. In a test binary whose TestMain is not Main, f never runs.
func AtExit(f func()) { atExit.Cleanup(f) }

// Proc is a helper running in a subprocess: it can be paused, resumed and
// killed for real.
type Proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{} // closed when the process has exited and been reaped
}

// HelperCommand returns the command that runs the helper registered under
// name in a subprocess: the test binary itself, re-executed with args. It
// dies with the test binary (on Linux); its output is the caller's to set.
func HelperCommand(t TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("fencingtest: helper: %v", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+name)
	kit.SetDeathSignal(cmd)
	return cmd
}

// StartHelper runs the helper registered under name in a subprocess (see
// HelperCommand), with args, its stdout read by Expect and Lines and its
// stderr the test's. t.Cleanup kills it.
func StartHelper(t TB, name string, args ...string) *Proc {
	t.Helper()
	return startProc(t, HelperCommand(t, name, args...), name)
}

// startProc starts cmd, the helper what, as StartHelper says.
func startProc(t TB, cmd *exec.Cmd, what string) *Proc {
	t.Helper()
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("fencingtest: helper: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("fencingtest: helper: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("fencingtest: start helper %s: %v", what, err)
	}
	p := &Proc{cmd: cmd, stdin: stdin, lines: make(chan string, 1024), done: make(chan struct{})}
	go p.read(stdout)
	t.Cleanup(p.kill)
	return p
}

func (p *Proc) read(r io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		select {
		case p.lines <- sc.Text():
		default: // nobody is reading: drop rather than block the helper
		}
	}
	close(p.lines)
	p.cmd.Wait()
}

// Pid returns the subprocess's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Expect waits up to d for an output line that starts with prefix and
// returns the rest of it, trimmed. Earlier lines are discarded.
func (p *Proc) Expect(t TB, d time.Duration, prefix string) string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("fencingtest: helper exited before printing %q", prefix)
			}
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return strings.TrimSpace(rest)
			}
		case <-timeout:
			t.Fatalf("fencingtest: helper printed no %q within %v", prefix, d)
		}
	}
}

// Lines returns the helper's output lines, for a test that reads all of
// them; it is closed when the helper exits. Expect reads the same channel.
func (p *Proc) Lines() <-chan string { return p.lines }

// Send writes line, and a newline, to the helper's stdin.
func (p *Proc) Send(t TB, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("fencingtest: send to helper %d: %v", p.Pid(), err)
	}
}

// Close closes the helper's stdin: a helper that follows the convention
// exits.
func (p *Proc) Close() { p.stdin.Close() }

// Stop pauses the process with SIGSTOP: it holds its sockets but runs no code.
func (p *Proc) Stop(t TB) { p.signal(t, syscall.SIGSTOP) }

// Cont resumes a process paused by Stop.
func (p *Proc) Cont(t TB) { p.signal(t, syscall.SIGCONT) }

// Kill kills the process with SIGKILL and waits until it is gone.
func (p *Proc) Kill(t TB) {
	p.signal(t, syscall.SIGKILL)
	<-p.done
}

// Exited returns a channel closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.done }

func (p *Proc) signal(t TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("fencingtest: signal %v to %d: %v", sig, p.Pid(), err)
	}
}

func (p *Proc) kill() {
	p.stdin.Close()
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}
