package kit

import (
	"os/exec"
	"syscall"
)

// SetDeathSignal makes cmd die with the test binary, if that dies without
// its cleanup (a timeout, a kill).
func SetDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
