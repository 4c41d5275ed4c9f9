package etcdtest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the helper if the test binary dies without cleanup.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
