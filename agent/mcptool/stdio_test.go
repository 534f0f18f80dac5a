package mcptool_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/mcptool"
	"github.com/personakit/persona/clock"
)

// children lists the processes whose parent is this test process,
// zombies included; ok is false where /proc does not tell.
func children(t *testing.T) (pids []int, ok bool) {
	t.Helper()
	files, _ := filepath.Glob("/proc/self/task/*/children")
	if len(files) == 0 {
		return nil, false
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, false
		}
		for _, field := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(field)
			require.NoError(t, err)
			pids = append(pids, pid)
		}
	}
	return pids, true
}

func requireNoChildren(t *testing.T) {
	t.Helper()
	if pids, ok := children(t); ok {
		require.Empty(t, pids, "no child process is left running or unreaped")
	}
}

// gone reports whether pid no longer exists (not even as a zombie).
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func pidOf(t *testing.T, reg *agent.Registry) (int, error) {
	t.Helper()
	out, err := call(t, reg, "kid_pid", `{}`)
	if err != nil {
		return 0, err
	}
	pid, convErr := strconv.Atoi(out)
	require.NoError(t, convErr)
	return pid, nil
}

// newPID calls the pid tool until it answers from a process other than
// old, moving the fake clock past any backoff; it returns the new pid and
// the first error seen.
func newPID(t *testing.T, reg *agent.Registry, clk *clock.Fake, old int) (int, error) {
	t.Helper()
	var first error
	var pid int
	require.Eventually(t, func() bool {
		p, err := pidOf(t, reg)
		if err != nil {
			if first == nil {
				first = err
			}
			clk.Advance(time.Second)
			return false
		}
		pid = p
		return p != old
	}, 20*time.Second, 10*time.Millisecond)
	return pid, first
}

// The stdio tests are not parallel: they count this process's children.

func TestStdioServerLifecycle(t *testing.T) {
	t.Setenv("MCPTOOL_SECRET", "do not pass on")
	clk := clock.NewFake(t0)
	srv := childServer(t, "kid", "ok")
	srv.CallTimeout = 20 * time.Second
	srv.Dir = t.TempDir()
	src, err := mcptool.Open(t.Context(), []mcptool.Server{srv}, mcptool.Options{Clock: clk, Logger: quietLogger(), BackoffMax: 8 * time.Second})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = src.Close()
		}
	})
	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))
	require.Contains(t, reg.Names(), "kid_garble")
	require.Contains(t, reg.Names(), "kid_add")

	out, err := call(t, reg, "kid_add", `{"a":40,"b":2}`)
	require.NoError(t, err)
	require.Equal(t, "42", out)
	pid1, err := pidOf(t, reg)
	require.NoError(t, err)
	require.NotEqual(t, os.Getpid(), pid1)
	require.False(t, gone(pid1))

	// Environment: only the allowlisted variables and Env; Dir is the
	// working directory.
	for name, want := range map[string]string{
		"MCPTOOL_SECRET":      "MCPTOOL_SECRET=",
		"MCPTOOL_TEST_SERVER": "MCPTOOL_TEST_SERVER=ok",
		"PATH":                "PATH=" + os.Getenv("PATH"),
	} {
		out, err := call(t, reg, "kid_getenv", `{"name":"`+name+`"}`)
		require.NoError(t, err)
		require.Equal(t, want, out)
	}
	out, err = call(t, reg, "kid_cwd", `{}`)
	require.NoError(t, err)
	wantDir, err := filepath.EvalSymlinks(srv.Dir)
	require.NoError(t, err)
	require.Equal(t, wantDir, out)

	// Timeout: the call fails, the session stays.
	errc := make(chan error, 1)
	go func() {
		_, err := call(t, reg, "kid_slow", `{}`)
		errc <- err
	}()
	waitPending(t, clk, 1)
	clk.Advance(20 * time.Second)
	err = <-errc
	require.ErrorIs(t, err, mcptool.ErrTimeout)
	require.ErrorContains(t, err, "timed out after 20s")
	p, err := pidOf(t, reg)
	require.NoError(t, err)
	require.Equal(t, pid1, p, "a timeout does not restart the server")

	// Killed: the next calls reconnect (transparently, or after a clear
	// error), all on one new process.
	require.NoError(t, syscall.Kill(pid1, syscall.SIGKILL))
	pid2, first := newPID(t, reg, clk, pid1)
	if first != nil {
		t.Log("after the kill:", first)
		require.True(t, errors.Is(first, mcptool.ErrConnectionLost) || errors.Is(first, mcptool.ErrUnavailable), "clear error: %v", first)
	}
	require.Eventually(t, func() bool { return gone(pid1) }, 10*time.Second, 5*time.Millisecond, "the killed server is reaped")
	var wg sync.WaitGroup
	pids := make([]int, 8)
	for i := range pids {
		wg.Go(func() {
			p, err := pidOf(t, reg)
			if err == nil {
				pids[i] = p
			}
		})
	}
	wg.Wait()
	for _, p := range pids {
		require.Equal(t, pid2, p, "concurrent calls share the one session")
	}

	// Garbage on stdout mid-call breaks the stream: a clear error, then a
	// new process.
	_, err = call(t, reg, "kid_garble", `{}`)
	t.Log(err)
	require.ErrorIs(t, err, mcptool.ErrConnectionLost)
	pid3, _ := newPID(t, reg, clk, pid2)
	require.Eventually(t, func() bool { return gone(pid2) }, 10*time.Second, 5*time.Millisecond)

	// A result over the transport's frame limit: a clear error, no crash,
	// and the server comes back.
	_, err = call(t, reg, "kid_huge", `{}`)
	t.Log(err)
	require.ErrorIs(t, err, mcptool.ErrConnectionLost)
	require.ErrorContains(t, err, "maximum line length")
	pid4, _ := newPID(t, reg, clk, pid3)
	require.Eventually(t, func() bool { return gone(pid3) }, 10*time.Second, 5*time.Millisecond)

	require.NoError(t, src.Close())
	closed = true
	require.True(t, gone(pid4), "Close stops and reaps the server")
	requireNoChildren(t)
	_, err = call(t, reg, "kid_add", `{"a":1,"b":1}`)
	require.ErrorIs(t, err, mcptool.ErrClosed)
	require.NoError(t, src.Close(), "Close is idempotent")
}

func TestStdioGarbageAtOpen(t *testing.T) {
	srv := childServer(t, "junk", "garbage")
	_, err := mcptool.Open(t.Context(), []mcptool.Server{srv}, mcptool.Options{Logger: quietLogger()})
	require.Error(t, err)
	t.Log(err)
	require.ErrorContains(t, err, `mcp server "junk": MCP handshake:`)
	requireNoChildren(t)
}

func TestStdioSilentServerStartTimeout(t *testing.T) {
	clk := clock.NewFake(t0)
	srv := childServer(t, "mute", "silent")
	srv.StartTimeout = 3 * time.Second
	errc := make(chan error, 1)
	go func() {
		_, err := mcptool.Open(t.Context(), []mcptool.Server{srv}, mcptool.Options{Clock: clk, Logger: quietLogger()})
		errc <- err
	}()
	// Let the process start and sit silent before its time runs out.
	require.Eventually(t, func() bool {
		pids, ok := children(t)
		return !ok || len(pids) == 1
	}, 10*time.Second, time.Millisecond)
	waitPending(t, clk, 1)
	clk.Advance(3 * time.Second)
	select {
	case err := <-errc:
		t.Log(err)
		require.ErrorContains(t, err, `mcp server "mute": did not start within 3s`)
	case <-time.After(20 * time.Second):
		t.Fatal("Open did not give up at StartTimeout")
	}
	requireNoChildren(t)
}

func TestStdioCommandNotFound(t *testing.T) {
	_, err := mcptool.Open(t.Context(), []mcptool.Server{{Name: "nope", Command: "/nonexistent/mcp-server"}}, mcptool.Options{Logger: quietLogger()})
	require.ErrorContains(t, err, `mcp server "nope": start "/nonexistent/mcp-server":`)
}

// TestCloseLeavesNoGoroutines runs a stdio and an HTTP server through
// calls, a timeout and a reconnect, then checks that Close (and stopping
// the test's own HTTP server) brings the goroutine count back.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		hooks := newHooks()
		hs := startHTTP(t, "", newTestServer(hooks, false))
		defer hs.stop()
		defer hooks.done()
		clk := clock.NewFake(t0)
		kid := childServer(t, "kid", "ok")
		kid.CallTimeout = time.Second
		src, err := mcptool.Open(t.Context(), []mcptool.Server{kid, {Name: "calc", URL: hs.url(), CallTimeout: time.Second}},
			mcptool.Options{Clock: clk, Logger: quietLogger()})
		require.NoError(t, err)
		reg := agent.NewRegistry()
		require.NoError(t, src.Register(reg))
		for _, name := range []string{"kid_add", "calc_add"} {
			out, err := call(t, reg, name, `{"a":1,"b":2}`)
			require.NoError(t, err)
			require.Equal(t, "3", out)
		}
		errc := make(chan error, 2)
		for _, name := range []string{"kid_slow", "calc_slow"} {
			go func() {
				_, err := call(t, reg, name, `{}`)
				errc <- err
			}()
		}
		// Over HTTP the request must reach the server before the timeout,
		// or the cancellation (a separate request) may overtake it and
		// leave the server's handler running.
		<-hooks.slowStarted
		waitPending(t, clk, 2)
		clk.Advance(time.Second)
		require.ErrorIs(t, <-errc, mcptool.ErrTimeout)
		require.ErrorIs(t, <-errc, mcptool.ErrTimeout)
		pid, err := pidOf(t, reg)
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		newPID(t, reg, clk, pid)
		require.NoError(t, src.Close())
	}()
	// Polled here, not with require.Eventually, whose own goroutines
	// would be counted.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if runtime.NumGoroutine() > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
	}
	requireNoChildren(t)
}
