package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
		cmd := exec.Command(os.Args[0], "-test.run=^TestWALBufferCommitSurvivesKill$", "-test.count=1")
		cmd.Env = append(os.Environ(), walChildEnv+"="+path, walChildEnv+"_N="+strconv.Itoa(n))
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
	return testEvent(channel.Group, "g"+strconv.Itoa(n%3), fmt.Sprint(n, "-", i), t0.Add(time.Duration(n*10+i)*time.Second),
		"a message written just before the process dies")
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
