// Package botruntest runs a reference bot (an examples/<platform> run
// function on the shared runner) in a test: on a goroutine, with its
// stdout and stderr captured, stopped at the end of the test.
package botruntest

import (
	"context"
	"io"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/internal/logbuf"
)

// WaitTimeout bounds every wait: a deadline for things to happen, never a
// timing assertion.
const WaitTimeout = 20 * time.Second

// RunFunc is a reference bot's run: main without the process globals.
type RunFunc func(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error

// Bot is a running reference bot.
type Bot struct {
	// Stdout and Stderr hold what the bot wrote so far.
	Stdout, Stderr *logbuf.Buffer
	stop           func() error
}

// Stop cancels the bot's context and returns what run returned (nil
// after a clean stop); it is safe to call more than once.
func (b *Bot) Stop() error { return b.stop() }

// Start runs the bot with env until Stop or the end of the test, when run
// must have returned nil; a failed test logs the bot's output.
func Start(t *testing.T, run RunFunc, env map[string]string) *Bot {
	t.Helper()
	b := &Bot{Stdout: &logbuf.Buffer{}, Stderr: &logbuf.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, b.Stdout, b.Stderr) }()
	var once sync.Once
	var stopErr error
	b.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(WaitTimeout):
				stopErr = context.DeadlineExceeded
			}
		})
		return stopErr
	}
	t.Cleanup(func() {
		if err := b.stop(); err != nil {
			t.Errorf("run after cancel: %v", err)
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", b.Stdout, b.Stderr)
		}
	})
	return b
}

// WaitFor waits until re matches what was written to buf and returns the
// match with its groups.
func WaitFor(t *testing.T, buf *logbuf.Buffer, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(WaitTimeout)
	for {
		if m := rx.FindStringSubmatch(buf.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			require.Failf(t, "timed out", "waiting for %q in:\n%s", re, buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
