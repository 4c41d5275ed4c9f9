//go:build unix && !linux

package pgtest

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes cmd run as as (unless nil). There is no parent-death
// signal here: a test binary that dies without Stop leaves the server
// running.
func setProcAttr(cmd *exec.Cmd, as *account, _ syscall.Signal) {
	if as != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: as.uid, Gid: as.gid}}
	}
}

// processAlive reports whether process pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
