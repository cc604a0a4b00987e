package agentenv

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel SIGKILL the agent when longhaul dies
// (kill -9 included), so a resumed run never races an orphan.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
