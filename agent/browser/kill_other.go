//go:build !unix

package browser

import "os"

// killTree kills the Chromium process.
func killTree(pid int) {
	if pid <= 0 {
		return
	}
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
