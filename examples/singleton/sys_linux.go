package main

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// becomeSubreaper makes the keeper the parent of its orphaned descendants,
// so it can reap them and see its command's group empty, whatever the
// system's init does with zombies.
func becomeSubreaper() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// commandAttr puts the command in a process group of its own, and kills it
// should the keeper itself be killed.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// monotonicNow reads CLOCK_MONOTONIC, which runner and keeper share: a
// deadline sent as a point on it means the same instant in both processes,
// however long the message took.
func monotonicNow() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
