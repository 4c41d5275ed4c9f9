//go:build !linux

package kit

import "os/exec"

// SetDeathSignal does nothing where there is no parent-death signal.
func SetDeathSignal(*exec.Cmd) {}
