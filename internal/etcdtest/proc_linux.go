package etcdtest

import (
	"os/exec"
	"syscall"
)

// SetDeathSignal makes cmd die with the test binary, if that dies without
// its cleanup (a timeout, a kill).
func SetDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
