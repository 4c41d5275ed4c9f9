//go:build unix && !linux

package main

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// becomeSubreaper does nothing here: orphans of the command go to init,
// which reaps them.
func becomeSubreaper() {}

// commandAttr puts the command in a process group of its own. Without
// Linux's parent-death signal, a killed keeper leaves its command running.
func commandAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// monotonicNow reads CLOCK_MONOTONIC, which runner and keeper share.
func monotonicNow() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
