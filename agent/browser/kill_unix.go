//go:build unix

package browser

import "syscall"

// killTree kills the Chromium process and the process group it leads or
// belongs to (its helpers), never the caller's own group.
func killTree(pid int) {
	if pid <= 0 {
		return
	}
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid > 1 && pgid != syscall.Getpgrp() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
