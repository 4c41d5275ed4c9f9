// Package progtest runs an example program as its users do: as a separate
// process, with real flags, environment and signals. The process is the test
// binary itself, re-executed so that it runs the program's main instead of
// the tests; no separate build is needed and the race detector covers it.
package progtest

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// mainHelper is the etcdtest helper that runs the program's main.
const mainHelper = "progtest-main"

// Main is the whole TestMain of a program's tests: in a process started by
// Start it runs main (which exits on its own), otherwise the tests, with
// etcdtest's leak check.
func Main(m *testing.M, main func()) {
	fencingtest.RegisterHelper(mainHelper, func([]string) int {
		main() // it reads os.Args itself
		return 0
	})
	fencingtest.Main(m)
}

// Prog is one run of the program.
type Prog struct {
	cmd            *exec.Cmd
	stdout, stderr etcdtest.Buffer
	done           chan struct{} // closed once the process has exited
	code           int           // exit status, set before done closes
}

// Start runs the program with args, in its own process group, with env
// added to the test's environment. t.Cleanup kills it if it still runs.
func Start(t testing.TB, env []string, args ...string) *Prog {
	t.Helper()
	p := &Prog{cmd: fencingtest.HelperCommand(t, mainHelper, args...), done: make(chan struct{})}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if p.cmd.SysProcAttr == nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	p.cmd.SysProcAttr.Setpgid = true
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("progtest: start: %v", err)
	}
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if p.code < 0 && err != nil {
			p.code = -1 // killed by a signal
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Run runs the program to its end and returns its exit status, failing t
// if it has not exited within d.
func Run(t testing.TB, d time.Duration, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := Start(t, env, args...)
	code = p.Wait(t, d)
	return code, p.Stdout(), p.Stderr()
}

// Pid returns the process id (also its process group id).
func (p *Prog) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the program.
func (p *Prog) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("progtest: signal %v: %v", sig, err)
	}
}

// Wait waits for the program to exit and returns its status (-1 when a
// signal killed it), failing t after d.
func (p *Prog) Wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("progtest: %s still running after %v\nstdout:\n%s\nstderr:\n%s",
			strings.Join(p.cmd.Args[1:], " "), d, p.Stdout(), p.Stderr())
		return 0
	}
}

// Exited reports whether the program has exited.
func (p *Prog) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stdout returns what the program printed on stdout so far.
func (p *Prog) Stdout() string { return p.stdout.String() }

// Stderr returns what the program printed on stderr so far.
func (p *Prog) Stderr() string { return p.stderr.String() }

// WaitStderr waits until stderr contains s, failing t after d or if the
// program exits first.
func (p *Prog) WaitStderr(t testing.TB, d time.Duration, s string) {
	t.Helper()
	fencingtest.WaitFor(t, d, fmt.Sprintf("%q on stderr", s), func() bool {
		if strings.Contains(p.Stderr(), s) {
			return true
		}
		if p.Exited() && !strings.Contains(p.Stderr(), s) {
			t.Fatalf("progtest: exited with %d before printing %q\nstderr:\n%s", p.code, s, p.Stderr())
		}
		return false
	})
}

// CheckConnectFailures runs the program twice against endpoints it cannot
// use, a TLS cluster verified with the wrong CA and a port nothing listens
// on, and fails t unless each run exits 1 within d naming the endpoint on
// stderr. args are added to both runs.
func CheckConnectFailures(t testing.TB, c *fencingtest.Cluster, d time.Duration, env []string, args ...string) {
	t.Helper()
	ep := c.Endpoints()[0]
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"wrong CA", []string{"--endpoints", ep, "--cacert", c.TLS.WrongCA, "--cert", c.TLS.Cert, "--key", c.TLS.Key}, ep},
		{"unreachable", []string{"--endpoints", "127.0.0.1:1"}, "127.0.0.1:1"},
	} {
		code, _, stderr := Run(t, d, env, append(append(tc.args, "--dial-timeout", "2s"), args...)...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d (want 1), stderr lacks %q:\n%s", tc.name, code, tc.want, stderr)
		}
	}
}
