package store

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
)

// A DB owns its file: a second Open of the file while it is open fails
// with ErrLocked (under another name of the file too), and succeeds once
// the owner closed it. An Open that fails gives the lock back.
func TestOpenOwnsTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "persona.db")
	a, err := Open(path, Options{})
	require.NoError(t, err)

	_, err = Open(path, Options{})
	require.ErrorIs(t, err, ErrLocked)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "held by another DB of this process")
	require.ErrorContains(t, err, path+lockSuffix)
	pid, err := os.ReadFile(path + lockSuffix)
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(os.Getpid())+"\n", string(pid), "the lock file names its holder")

	link := filepath.Join(t.TempDir(), "link.db")
	require.NoError(t, os.Symlink(path, link))
	_, err = Open(link, Options{})
	require.ErrorIs(t, err, ErrLocked, "another name of the same file")

	require.NoError(t, a.Close())
	require.NoError(t, a.Close())
	b, err := Open(link, Options{})
	require.NoError(t, err, "free once the owner closed it")
	require.NoError(t, b.Close())

	// A failed Open leaves the file free.
	raw, err := sql.Open("sqlite3", path)
	require.NoError(t, err)
	_, err = raw.ExecContext(t.Context(), fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion()+1))
	require.NoError(t, err)
	require.NoError(t, raw.Close())
	for range 2 {
		_, err = Open(path, Options{})
		require.ErrorIs(t, err, ErrSchemaTooNew)
	}
}

// ownerChildEnv names the database of TestOpenLockedByAnotherProcess's and
// TestOpenFreesTheLeasesOfAKilledProcess's child processes; its _MODE
// variable says what the child does.
const ownerChildEnv = "PERSONA_STORE_OWNER_CHILD"

// A store file open in another process cannot be opened; once that
// process is killed (no Close), the kernel has released the lock and Open
// succeeds.
func TestOpenLockedByAnotherProcess(t *testing.T) {
	if path := os.Getenv(ownerChildEnv); path != "" {
		ownerChild(path, os.Getenv(ownerChildEnv+"_MODE"))
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "persona.db")
	cmd := childTest("TestOpenLockedByAnotherProcess", ownerChildEnv+"="+path, ownerChildEnv+"_MODE=hold")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer func() { _ = stdin.Close() }()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "open\n", line)

	_, err = Open(path, Options{})
	require.ErrorIs(t, err, ErrLocked)
	require.ErrorContains(t, err, fmt.Sprintf("held by process %d", cmd.Process.Pid))

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	d, err := Open(path, Options{})
	require.NoError(t, err, "a killed owner holds nothing")
	require.NoError(t, d.Close())
}

// TestOpenFreesTheLeasesOfAKilledProcess: a process claims items and a
// memory job and is killed (SIGKILL) long before its 10-minute leases
// expire. The next Open frees them: every item is claimable at once,
// though the chat's in-flight limit was full of the dead process's claims,
// with the attempts of the stored claims counted; a claim held in memory
// never reached the file, so it counted nothing. No clock moves past a
// lease.
func TestOpenFreesTheLeasesOfAKilledProcess(t *testing.T) {
	if path := os.Getenv(ownerChildEnv); path != "" {
		ownerChild(path, os.Getenv(ownerChildEnv+"_MODE"))
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "persona.db")
	d, err := Open(path, Options{Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	x, y, z := ownerChildEvents()
	for _, it := range []inbound.Item{{Event: x, Priority: inbound.PriorityDirect}, {Event: y, Priority: inbound.PriorityDirect},
		{Event: z}} {
		_, err := d.Enqueue(ctx, it)
		require.NoError(t, err)
	}
	_, err = d.EnqueueJob(ctx, memory.Job{MessageKey: x.Key(), SessionKey: x.SessionKey, Platform: x.Platform,
		SubjectUserID: x.Sender.ID})
	require.NoError(t, err)
	require.NoError(t, d.Close())

	out, err := childTest("TestOpenFreesTheLeasesOfAKilledProcess", ownerChildEnv+"="+path,
		ownerChildEnv+"_MODE=claim").Output()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the child must die by SIGKILL: %s", out)
	ws, ok := ee.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child: %v\n%s", err, out)
	require.Equal(t, fmt.Sprintf("claimed %s %s %s, job %s\n", x.Key(), y.Key(), z.Key(), x.Key()), string(out))

	// Two minutes after the claims: eight minutes before their leases end.
	clk := clock.NewFake(t0.Add(2 * time.Minute))
	d, err = Open(path, Options{Clock: clk})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	for _, c := range []struct {
		ev       channel.Event
		attempts int
		lastErr  string
	}{{x, 1, freedAtOpen}, {y, 1, freedAtOpen}, {z, 0, ""}} {
		rec, err := d.Lookup(ctx, c.ev.Key())
		require.NoError(t, err)
		require.Equal(t, inbound.StatusPending, rec.Status, c.ev.Key())
		require.Equal(t, c.attempts, rec.Attempts, c.ev.Key())
		require.Equal(t, c.lastErr, rec.LastError, c.ev.Key())
	}
	at, ok, err := d.NextAvailable(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, at.After(clk.Now()), "claimable now")
	ls, err := d.Claim(ctx, inbound.Limits{Max: 10, PerPrivate: 2, Owner: "next", HoldBelow: inbound.PriorityDirect})
	require.NoError(t, err)
	require.Equal(t, []string{x.Key(), y.Key(), z.Key()}, ids(ls), "the private chat's two slots are free")
	require.Equal(t, []int{2, 2, 1}, []int{ls[0].Attempts, ls[1].Attempts, ls[2].Attempts})
	require.Equal(t, []bool{true, true, false}, []bool{ls[0].Orphaned, ls[1].Orphaned, ls[2].Orphaned},
		"the leases the dead process had stored are orphans; its held one never reached the file")
	for _, l := range ls {
		require.NoError(t, d.Complete(ctx, l, inbound.Outcome{Code: outcome.Replied}))
	}
	jobs, err := d.ClaimJobs(ctx, "next", 5, 0)
	require.NoError(t, err)
	require.Len(t, jobs, 1, "the memory job is claimable at once too")
	require.Equal(t, x.Key(), jobs[0].Job.MessageKey)
	require.Equal(t, 2, jobs[0].Attempts)
}

// ownerChildEvents are the items of TestOpenFreesTheLeasesOfAKilledProcess:
// two messages of a private chat (the in-flight limit of a private chat is
// 2) and one of a group.
func ownerChildEvents() (x, y, z channel.Event) {
	return testEvent(channel.Private, "p1", "x", t0.Add(-3*time.Second), "first"),
		testEvent(channel.Private, "p1", "y", t0.Add(-2*time.Second), "second"),
		testEvent(channel.Group, "g1", "z", t0.Add(-time.Second), "third")
}

// ownerChild is the child process of the ownership tests. "hold": open the
// store, say so, and wait until stdin ends. "claim": claim every item
// (the private chat's two stored, the group's held in memory) and the
// memory job with 10-minute leases, say so, and die by SIGKILL.
func ownerChild(path, mode string) {
	ctx := context.Background()
	d, err := Open(path, Options{Clock: clock.NewFake(t0)})
	if err != nil {
		panic(err)
	}
	switch mode {
	case "hold":
		fmt.Println("open")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		_ = d.Close()
		os.Exit(0)
	case "claim":
		ls, err := d.Claim(ctx, inbound.Limits{Max: 10, PerPrivate: 2, Owner: "dead", Lease: 10 * time.Minute,
			HoldBelow: inbound.PriorityDirect})
		if err != nil {
			panic(err)
		}
		jobs, err := d.ClaimJobs(ctx, "dead", 5, 10*time.Minute)
		if err != nil || len(jobs) != 1 {
			panic(fmt.Sprint(len(jobs), err))
		}
		fmt.Printf("claimed %s, job %s\n", strings.Join(ids(ls), " "), jobs[0].Job.MessageKey)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal ends the process
	}
	panic(errors.New("unknown mode " + mode))
}

// A child process forked by this one holds a copy of the lock file's
// descriptor until it execs: a DB closed meanwhile leaves the lock taken
// by nobody of this process for a moment. The next Open waits for it
// instead of failing. (The copy is made here with dup, which shares the
// lock exactly as a forked child's inherited descriptor does.)
func TestOpenWaitsForALockAForkedChildHolds(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "persona.db")
	d, err := Open(path, Options{})
	require.NoError(t, err)
	dup, err := syscall.Dup(int(d.owner.f.Fd()))
	require.NoError(t, err)
	require.NoError(t, d.Close())
	go func() {
		time.Sleep(50 * time.Millisecond) // the child's exec
		_ = syscall.Close(dup)
	}()
	d, err = Open(path, Options{})
	require.NoError(t, err, "the lock came free when the copy was closed")
	require.NoError(t, d.Close())

	// A DB of this process that really holds it is refused at once.
	d, err = Open(path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	start := time.Now()
	_, err = Open(path, Options{})
	require.ErrorIs(t, err, ErrLocked)
	require.Less(t, time.Since(start), time.Second, "no waiting for a holder that is really there")
}
