package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
)

// The writer's WAL writes are gathered: a commit of several pages costs one
// write call, not two per page.
func TestWALBufferGathersACommitsFrames(t *testing.T) {
	d := open(t, clock.Real)
	r0, i0 := walWrites()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				enqueue(t, d, testEvent(channel.Group, fmt.Sprint("g", g), fmt.Sprint(g, "-", i), t0, "hello there"))
			}
		})
	}
	wg.Wait()
	r1, i1 := walWrites()
	requested, issued := r1-r0, i1-i0
	t.Logf("%d WAL writes asked for, %d issued", requested, issued)
	require.Positive(t, issued)
	// Every frame is two writes (header and page), and every commit has
	// several frames (the transcript row, its id index entry, the queue
	// row and its index entry).
	require.GreaterOrEqual(t, requested, 4*issued, "a commit's frames go out in one write")
}

// childTest runs the test binary again for test alone, with env added to
// the environment (a test's child-process side reads it).
func childTest(test string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// walChildEnv names the database a child process of
// TestWALBufferCommitSurvivesKill writes to.
const walChildEnv = "PERSONA_STORE_WALBUF_CHILD"

// A write that returned is in the file even when the process dies the next
// instant: the buffer never holds a committed frame.
func TestWALBufferCommitSurvivesKill(t *testing.T) {
	if path := os.Getenv(walChildEnv); path != "" {
		walChild(path, os.Getenv(walChildEnv+"_N"))
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	path := filepath.Join(t.TempDir(), "persona.db")
	const runs = 8
	for n := range runs {
		cmd := childTest("TestWALBufferCommitSurvivesKill", walChildEnv+"="+path, walChildEnv+"_N="+strconv.Itoa(n))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "the child must die by SIGKILL: %s", out)
		ws, ok := ee.Sys().(syscall.WaitStatus)
		require.True(t, ok)
		require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child: %v\n%s", err, out)
	}
	d, err := Open(path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	for n := range runs {
		for i := range 10 {
			ev := walChildEvent(n, i)
			id := ev.Key()
			_, err := d.Lookup(t.Context(), id)
			require.NoError(t, err, "item %s, written before the kill", id)
		}
	}
}

func walChildEvent(n, i int) channel.Event {
	text := "a message written just before the process dies"
	if i%4 == 3 {
		// Larger than the VFS's buffer: its commit is written in parts.
		text = strings.Repeat("a long message that fills many pages ", 6000)
	}
	return testEvent(channel.Group, "g"+strconv.Itoa(n%3), fmt.Sprint(n, "-", i), t0.Add(time.Duration(n*10+i)*time.Second), text)
}

// walChild writes ten items, each in its own commit, and kills its own
// process as soon as the last write returns (no Close, no exit handlers).
func walChild(path, run string) {
	n, err := strconv.Atoi(run)
	if err != nil {
		panic(err)
	}
	d, err := Open(path, Options{})
	if err != nil {
		panic(err)
	}
	for i := range 10 {
		if _, err := d.Enqueue(context.Background(), inbound.Item{Event: walChildEvent(n, i)}); err != nil {
			panic(err)
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal ends the process
}

// walFullEnv names the database a child process of
// TestWALBufferWriteFailureFailsTheCommit fills.
const walFullEnv = "PERSONA_STORE_WALBUF_FULL"

// A WAL write that fails (here: the file size limit) fails the commit it
// belongs to, and only that: every write that returned success is in the
// file afterwards and the file is intact.
func TestWALBufferWriteFailureFailsTheCommit(t *testing.T) {
	if path := os.Getenv(walFullEnv); path != "" {
		walFullChild(path)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	path := filepath.Join(t.TempDir(), "persona.db")
	out, err := childTest("TestWALBufferWriteFailureFailsTheCommit", walFullEnv+"="+path).Output()
	require.NoError(t, err, "child: %s", out)
	var stored []string
	failed := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case strings.HasPrefix(line, "stored "):
			stored = append(stored, strings.TrimPrefix(line, "stored "))
		case strings.HasPrefix(line, "failed "):
			failed = true
		}
	}
	require.True(t, failed, "the size limit made a write fail: %s", out)
	require.NotEmpty(t, stored)

	// DeferSearch, as in the child: rows queued for search indexing make
	// integrity_check report the FTS4 index as behind its content.
	d, err := Open(path, Options{DeferSearch: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	for _, id := range stored {
		_, err := d.Lookup(t.Context(), id)
		require.NoError(t, err, "item %s was stored before the failure", id)
	}
	var check string
	require.NoError(t, d.rdb.QueryRowContext(t.Context(), "PRAGMA integrity_check").Scan(&check))
	require.Equal(t, "ok", check)
}

// walFullChild opens a store, limits the size of any file it writes to a
// little more than the store has, and enqueues large items until a write
// fails, printing each outcome.
func walFullChild(path string) {
	d, err := Open(path, Options{DeferSearch: true})
	if err != nil {
		panic(err)
	}
	signal.Ignore(syscall.SIGXFSZ) // a write past the limit fails with EFBIG instead
	var size int64
	for _, f := range []string{path, path + "-wal"} {
		if st, err := os.Stat(f); err == nil {
			size = max(size, st.Size())
		}
	}
	limit := uint64(size + 1<<20)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		panic(err)
	}
	body := strings.Repeat("a long message to fill the log quickly ", 200)
	huge := strings.Repeat("a message larger than the VFS's buffer ", 5000)
	for i := range 200 {
		text := body
		if i%3 == 2 {
			text = huge // its commit is written in parts
		}
		ev := testEvent(channel.Group, "g", fmt.Sprint("big-", i), t0.Add(time.Duration(i)*time.Second), text)
		if _, err := d.Enqueue(context.Background(), inbound.Item{Event: ev}); err != nil {
			fmt.Printf("failed %s: %v\n", ev.Key(), err)
			return // no Close: the process ends as a crash would leave it
		}
		fmt.Printf("stored %s\n", ev.Key())
	}
}
