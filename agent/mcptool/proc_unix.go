//go:build unix

package mcptool

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the command in a process group of its own, so
// that stopping it also stops the processes it started (an npx launcher's
// node child, say).
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills every process left in the group led by pid.
func killGroup(pid int) {
	if pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}
