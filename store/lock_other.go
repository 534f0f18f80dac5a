//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd || illumos || windows)

package store

import (
	"os"
	"sync"
)

// On the remaining platforms (no flock(2) in package syscall: Solaris,
// AIX, ...) the lock holds within this process only: a second Open of the
// file by this process fails with ErrLocked, a second process is not
// stopped. Run one process per store file there.
var (
	heldMu sync.Mutex
	held   = map[string]bool{}
)

// tryLock opens (creating) the lock file at path and marks it held by this
// process: errHeld when a DB of this process holds it already.
func tryLock(path string) (*os.File, error) {
	heldMu.Lock()
	defer heldMu.Unlock()
	if held[path] {
		return nil, errHeld
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	held[path] = true
	return f, nil
}

// unlock closes the lock file and marks it free.
func unlock(f *os.File) error {
	heldMu.Lock()
	defer heldMu.Unlock()
	delete(held, f.Name())
	return f.Close()
}
