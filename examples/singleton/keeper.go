package main

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The keeper is a small process between the runner and the command. It
// exists because the runner can be paused (SIGSTOP, a long GC, a debugger)
// or killed, and neither must leave the command running past its term: the
// keeper is not paused with the runner, holds the term's deadline itself,
// and kills the command's process group when the deadline passes without an
// extension, when the runner says stop, or when the runner dies (its end of
// the control pipe closes).
//
// Protocol, one line each on the control pipe (fd 3), from the runner:
//
//	deadline <ns>   the term is valid until <ns> on CLOCK_MONOTONIC
//	stop            the term ended: stop the command
//
// The keeper starts the command after the first deadline, and exits once no
// process of the command's group is left: with the command's own exit
// status when it ended by itself, with exitStopped when the keeper stopped
// it.

// keeperEnv marks a re-executed singleton that must act as the keeper.
const keeperEnv = "LEASEHOLD_SINGLETON_KEEPER"

// exitStopped is the keeper's status when it stopped the command.
const exitStopped = 125

// groupPoll is how often a stopping keeper checks that the command's
// process group is empty: a local system call, no network.
const groupPoll = 10 * time.Millisecond

type keeper struct {
	grace    time.Duration
	argv     []string
	log      *slog.Logger
	pid      int           // the command's pid, which is also its process group id
	deadline time.Duration // on the monotonic clock; the term's ValidUntil
	killAt   time.Duration // on the monotonic clock; zero until stopping starts
}

// keeperMain is the keeper process: argv is "--grace D -- command args...".
func keeperMain(argv []string) int {
	k := &keeper{log: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "keeper")}
	if len(argv) < 4 || argv[0] != "--grace" || argv[2] != "--" {
		k.log.Error("bad arguments", "argv", argv)
		return 2
	}
	var err error
	if k.grace, err = time.ParseDuration(argv[1]); err != nil {
		k.log.Error("bad --grace", "err", err)
		return 2
	}
	k.argv = argv[3:]
	// The runner decides about signals; a Ctrl-C meant for it must not take
	// the keeper down before the command is stopped. Catch and drop them
	// rather than ignore them: an ignored signal stays ignored across exec,
	// and a shell started with SIGTERM ignored cannot trap it.
	dropped := make(chan os.Signal, 1)
	signal.Notify(dropped, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	go func() {
		for range dropped {
		}
	}()
	becomeSubreaper() // orphans of the command are ours to reap, not init's
	return k.run(os.NewFile(3, "control"))
}

func (k *keeper) run(control io.Reader) int {
	lines := make(chan string)
	go readLines(control, lines)
	first, ok := <-lines
	if !ok || !k.apply(first) {
		k.log.Error("no deadline from the runner: not starting the command")
		return exitStopped
	}
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	defer signal.Stop(children)
	if err := k.start(); err != nil {
		k.log.Error("command did not start", "err", err)
		return 127
	}
	status := -1 // the command's exit status, once reaped
	expiry := time.NewTimer(k.deadline - monotonicNow())
	defer expiry.Stop()
	for status < 0 {
		select {
		case line, ok := <-lines:
			switch {
			case !ok:
				k.log.Warn("runner gone: stopping the command", "pid", k.pid)
				return k.stop(-1, lines)
			case line == "stop":
				return k.stop(-1, lines)
			case k.apply(line):
				expiry.Reset(k.deadline - monotonicNow())
			}
		case <-expiry.C:
			k.log.Warn("term deadline passed without renewal: stopping the command", "pid", k.pid)
			return k.stop(-1, lines)
		case <-children:
			status = k.reap()
		}
	}
	// The command ended by itself; whatever it left in its group goes too.
	return k.stop(status, lines)
}

// apply takes a deadline line and reports whether it was one.
func (k *keeper) apply(line string) bool {
	ns, ok := strings.CutPrefix(line, "deadline ")
	if !ok {
		return false
	}
	d, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return false
	}
	k.deadline = time.Duration(d)
	return true
}

func (k *keeper) start() error {
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, keeperEnv+"=") {
			env = append(env, kv)
		}
	}
	path, err := exec.LookPath(k.argv[0])
	if err != nil {
		return err
	}
	attr := &os.ProcAttr{Env: env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: commandAttr()}
	p, err := os.StartProcess(path, k.argv, attr)
	if err != nil {
		return err
	}
	k.pid = p.Pid
	p.Release() // the keeper reaps with wait4 itself: orphans come to it too
	return nil
}

// stop ends the command's process group: SIGTERM now, SIGKILL when grace
// has passed or at the deadline plus grace, whichever is first (the session
// margin covers grace, so the kill lands before etcd can expire the lease).
// It returns once the group is empty: with status if the command had
// already exited by itself (status >= 0), otherwise with exitStopped.
func (k *keeper) stop(status int, lines <-chan string) int {
	stopping := status < 0
	now := monotonicNow()
	k.killAt = min(now+k.grace, k.deadline+k.grace)
	if groupAlive(k.pid) {
		k.log.Info("sending SIGTERM to the command's process group", "pgid", k.pid, "grace", k.grace)
		syscall.Kill(-k.pid, syscall.SIGTERM)
	}
	killed := false
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	for {
		if s := k.reap(); s >= 0 && status < 0 {
			status = s
		}
		if !groupAlive(k.pid) {
			break
		}
		if !killed && monotonicNow() >= k.killAt {
			k.log.Warn("grace over: sending SIGKILL to the command's process group", "pgid", k.pid)
			syscall.Kill(-k.pid, syscall.SIGKILL)
			killed = true
		}
		select {
		case <-tick.C:
		case _, ok := <-lines:
			if !ok {
				lines = nil // the runner is gone: nothing more to read
			}
		}
	}
	k.log.Debug("the command's process group is empty", "pgid", k.pid)
	if stopping {
		return exitStopped
	}
	return status
}

// reap collects every exited child (the command and orphans reparented to
// the keeper) and returns the command's exit status, or -1 if the command
// was not among them.
func (k *keeper) reap() int {
	status := -1
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return status
		}
		if pid == k.pid {
			status = exitStatus(ws)
		}
	}
}

func exitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// groupAlive reports whether any process is left in process group pgid.
func groupAlive(pgid int) bool {
	return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

func readLines(r io.Reader, out chan<- string) {
	defer close(out)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		out <- sc.Text()
	}
}
