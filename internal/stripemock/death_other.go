//go:build !linux

package stripemock

import "os/exec"

// setDeathSignal: outside Linux, TestMain must call Stop.
func setDeathSignal(*exec.Cmd) {}
