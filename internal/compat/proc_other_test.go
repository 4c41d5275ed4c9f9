//go:build !linux

package compat_test

import "os/exec"

// setDeathSignal does nothing where there is no parent-death signal: a test
// binary that dies without its cleanup leaves the etcd server running.
func setDeathSignal(*exec.Cmd) {}
