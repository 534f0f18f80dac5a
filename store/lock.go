package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrLocked is returned (wrapped) by Open when another open DB owns the
// database file: a DB of another process, or another DB of this one. A
// store file has one owner at a time (see the package documentation,
// "Ownership and crash recovery"); the owner keeps it until Close, or until
// its process ends, however it ends.
var ErrLocked = errors.New("store: the database file is owned by another open DB")

// lockSuffix names the lock file beside a database file: "persona.db"
// is owned through "persona.db-lock".
const lockSuffix = "-lock"

// errHeld is what a platform's tryLock returns when another holder has the
// lock.
var errHeld = errors.New("held")

// ownerLock is a DB's hold on its file's lock file.
type ownerLock struct {
	path string
	f    *os.File
}

// lockPath returns the lock file of the database file at abs (absolute).
// Symbolic links are resolved, so that two names of one file share one
// lock file.
func lockPath(abs string) string {
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r + lockSuffix
	}
	dir, base := filepath.Split(abs)
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return filepath.Join(r, base) + lockSuffix
	}
	return abs + lockSuffix
}

// acquireOwner takes the lock of the database file at abs (absolute) for a
// new DB, and records this process's id in the lock file. It fails with
// ErrLocked, naming the holder when the lock file tells it, while another
// DB holds the lock.
func acquireOwner(abs string) (*ownerLock, error) {
	lp := lockPath(abs)
	ownedMu.Lock()
	if owned[lp] {
		ownedMu.Unlock()
		return nil, fmt.Errorf("%w (held by another DB of this process; lock file %s)", ErrLocked, lp)
	}
	owned[lp] = true
	ownedMu.Unlock()
	f, err := tryLock(lp)
	// No DB of this process holds the file, yet the lock is taken and the
	// lock file names this process: a child process forked by this one
	// (exec.Command) still holds a copy of a released lock's descriptor
	// until it execs, which closes it. Wait for that, briefly (on the wall
	// clock, not Options.Clock: it waits for the operating system).
	for wait := time.Millisecond; errors.Is(err, errHeld) && holderPID(lp) == os.Getpid() && wait < 2*time.Second; wait *= 2 {
		time.Sleep(wait)
		f, err = tryLock(lp)
	}
	if err != nil {
		ownedMu.Lock()
		delete(owned, lp)
		ownedMu.Unlock()
	}
	if errors.Is(err, errHeld) {
		return nil, fmt.Errorf("%w (%s; lock file %s)", ErrLocked, holder(lp), lp)
	}
	if err != nil {
		return nil, fmt.Errorf("store: lock file %s: %w", lp, err)
	}
	// The holder's id, for the error of a later Open; a stale one is
	// overwritten here, and an unreadable one only makes that error vaguer.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &ownerLock{path: lp, f: f}, nil
}

// holder describes the owner recorded in the lock file at lp.
// holderPID returns the process id the lock file names (0 if none).
func holderPID(lp string) int {
	b, err := os.ReadFile(lp)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

func holder(lp string) string {
	switch pid := holderPID(lp); pid {
	case 0:
		return "holder unknown"
	case os.Getpid():
		return "held by another DB of this process"
	default:
		return "held by process " + strconv.Itoa(pid)
	}
}

// owned are the lock files a DB of this process holds.
var (
	ownedMu sync.Mutex
	owned   = map[string]bool{}
)

// release gives the lock up (Close). The lock file stays: removing it
// could let a DB that opened it just before lock a file nobody else sees.
func (l *ownerLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := unlock(l.f)
	l.f = nil
	ownedMu.Lock()
	delete(owned, l.path)
	ownedMu.Unlock()
	return err
}
