package chantest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
)

// The conformance suite must catch broken adapters. TestBrokenHelper runs
// the suite against deliberately broken channels in a child process (a
// failing suite would otherwise fail this test binary);
// TestConformanceCatchesBrokenAdapters checks which subtests failed.

const brokenEnv = "CHANTEST_BROKEN_HELPER"

// duplicateSend delivers every message twice.
type duplicateSend struct{ *chantest.Channel }

func (d duplicateSend) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	rc, err := d.Channel.Send(ctx, out)
	if err == nil {
		_, err = d.Channel.Send(ctx, out)
	}
	return rc, err
}

// unclassified loses the class of send errors (as if it classified by
// message text).
type unclassified struct{ *chantest.Channel }

func (u unclassified) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	rc, err := u.Channel.Send(ctx, out)
	if err != nil {
		err = errors.New("send failed: " + err.Error())
	}
	return rc, err
}

// acksOnError acknowledges the platform even when the sink failed.
type acksOnError struct{ *chantest.Channel }

func (a acksOnError) Run(ctx context.Context, sink channel.Sink) error {
	return a.Channel.Run(ctx, swallow{sink})
}

type swallow struct{ channel.Sink }

func (s swallow) HandleEvent(ctx context.Context, ev channel.Event) error {
	_ = s.Sink.HandleEvent(ctx, ev)
	return nil
}

// ignoresCancel keeps running after its context ended.
type ignoresCancel struct {
	*chantest.Channel
	release chan struct{}
}

func (i ignoresCancel) Run(ctx context.Context, sink channel.Sink) error {
	err := i.Channel.Run(ctx, sink)
	<-i.release
	return err
}

func TestBrokenHelper(t *testing.T) {
	if os.Getenv(brokenEnv) != "1" {
		t.Skip("runs only as the child of TestConformanceCatchesBrokenAdapters")
	}
	env := func(ch channel.Channel, c *chantest.Channel) chantest.Env {
		return chantest.Env{Channel: ch, Platform: &platform{c: c}, BotID: c.BotID(), Caps: allCaps, Timeout: time.Second}
	}
	harnesses := map[string]chantest.HarnessFunc{
		"DuplicateSend": func(t *testing.T) chantest.Env {
			c := chantest.New(chantest.Config{})
			return env(duplicateSend{c}, c)
		},
		"Unclassified": func(t *testing.T) chantest.Env {
			c := chantest.New(chantest.Config{})
			return env(unclassified{c}, c)
		},
		"AcksOnError": func(t *testing.T) chantest.Env {
			c := chantest.New(chantest.Config{})
			return env(acksOnError{c}, c)
		},
		"IgnoresCancel": func(t *testing.T) chantest.Env {
			c := chantest.New(chantest.Config{})
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			e := env(ignoresCancel{c, release}, c)
			e.Timeout = 200 * time.Millisecond // every subtest waits for it in cleanup
			return e
		},
		"WrongBotID": func(t *testing.T) chantest.Env {
			c := chantest.New(chantest.Config{})
			e := env(c, c)
			e.BotID = "someone-else"
			return e
		},
	}
	for name, h := range harnesses {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			chantest.Conformance(t, parallelHarness{h})
		})
	}
}

func TestConformanceCatchesBrokenAdapters(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a child test process")
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBrokenHelper$", "-test.v", "-test.count=1", "-test.parallel=64")
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suite passed broken adapters:\n%s", out)

	tests := []struct {
		harness string
		fail    []string
		pass    []string
	}{
		{"DuplicateSend", []string{"Send", "ReplyTo", "ConcurrentSends", "TextRoundTrip"}, []string{"Name", "GroupMessage", "NackedEventNotLost"}},
		{"Unclassified", []string{"Offline", "Rejected"}, []string{"Send", "GroupMessage"}},
		{"AcksOnError", []string{"NackedEventNotLost"}, []string{"Send", "GroupMessage"}},
		{"IgnoresCancel", []string{"RunStopsOnCancel"}, []string{"Name"}},
		{"WrongBotID", []string{"GroupMessage", "PrivateMessage", "MentionBot"}, []string{"Send", "Name"}},
	}
	for _, tc := range tests {
		t.Run(tc.harness, func(t *testing.T) {
			t.Parallel()
			for _, name := range tc.fail {
				re := regexp.MustCompile(`--- FAIL: TestBrokenHelper/` + tc.harness + `/` + name + ` `)
				require.Regexp(t, re, string(out), "%s/%s should fail", tc.harness, name)
			}
			for _, name := range tc.pass {
				re := regexp.MustCompile(`--- PASS: TestBrokenHelper/` + tc.harness + `/` + name + ` `)
				require.Regexp(t, re, string(out), "%s/%s should pass", tc.harness, name)
			}
		})
	}
}
