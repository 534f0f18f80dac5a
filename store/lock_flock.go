//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd || illumos

package store

import (
	"errors"
	"os"
	"syscall"
)

// tryLock opens (creating) the lock file at path and takes an exclusive
// flock(2) on it without waiting: errHeld when another open file
// description has it, whether in another process or in this one (a second
// Open opens the file again). The kernel drops the lock when the file is
// closed, also when the process dies. The file is opened close-on-exec, as
// Go opens every file, so a child process never inherits the lock.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	raw, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	var lockErr error
	if err := raw.Control(func(fd uintptr) {
		for {
			lockErr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
			if !errors.Is(lockErr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		lockErr = err
	}
	if lockErr != nil {
		_ = f.Close()
		if errors.Is(lockErr, syscall.EWOULDBLOCK) {
			return nil, errHeld
		}
		return nil, lockErr
	}
	return f, nil
}

// unlock releases the lock by closing the file.
func unlock(f *os.File) error { return f.Close() }
