package pgtest

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes cmd run as as (unless nil) and receive deathSig when
// the test binary dies, even by SIGKILL. Go's child sets the parent-death
// signal after changing its credentials (syscall/exec_linux.go), as it must:
// a change of user clears it. The kernel sends it when the thread that
// started cmd exits; Go does not end its threads while the process runs,
// unless a goroutine that called runtime.LockOSThread returns without
// unlocking, which nothing here does.
func setProcAttr(cmd *exec.Cmd, as *account, deathSig syscall.Signal) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: deathSig}
	if as != nil {
		// No supplementary groups: root's are not the postgres user's.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: as.uid, Gid: as.gid}
	}
}

// processAlive reports whether process pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
