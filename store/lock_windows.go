//go:build windows

package store

import (
	"errors"
	"os"
	"syscall"
)

// errorSharingViolation is Windows's ERROR_SHARING_VIOLATION, which package
// syscall does not name.
const errorSharingViolation = syscall.Errno(32)

// tryLock opens (creating) the lock file at path for reading and writing,
// sharing it for reading only: while it is open, another open for writing,
// in this process or another, fails with a sharing violation (errHeld),
// and the holder's id stays readable. Windows closes the handle, and so
// releases the lock, when the process ends, however it ends.
func tryLock(path string) (*os.File, error) {
	p, err := syscall.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	h, err := syscall.CreateFile(p, syscall.GENERIC_READ|syscall.GENERIC_WRITE, syscall.FILE_SHARE_READ, nil,
		syscall.OPEN_ALWAYS, syscall.FILE_ATTRIBUTE_NORMAL, 0)
	if errors.Is(err, errorSharingViolation) {
		return nil, errHeld
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(h), path), nil
}

// unlock releases the lock by closing the file.
func unlock(f *os.File) error { return f.Close() }
