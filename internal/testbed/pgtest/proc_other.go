//go:build !unix

package pgtest

import (
	"os/exec"
	"syscall"
)

// setProcAttr does nothing where there are neither users to switch to nor
// a parent-death signal.
func setProcAttr(*exec.Cmd, *account, syscall.Signal) {}

// processAlive says every process exists: without a way to tell, no
// directory is taken for stale.
func processAlive(int) bool { return true }
