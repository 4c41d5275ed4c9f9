package compat_test

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the etcd server if the test binary dies without its
// cleanup (a test timeout, a kill). Copied from internal/etcdtest.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
