package stripemock

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills stripe-mock when the test binary dies, even when no
// TestMain calls Stop.
func setDeathSignal(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
