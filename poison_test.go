package persona_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/route"
)

// poisonGrace is how long a poison child goes on after reaching the poison
// message before it dies, so that the other turns in flight finish (each
// death charges an attempt to every turn in flight).
const poisonGrace = 500 * time.Millisecond

// poisonDeaths is how the child dies the n-th time it reaches the poison
// message: by a panic no recover can catch, by the parent's SIGKILL, by
// its own SIGKILL, ...
var poisonDeaths = []string{"panic", "parent", "selfkill", "parent", "panic", "parent", "parent", "parent", "parent"}

// TestPoisonMessageCrashes: a group message whose stage (an embedder's
// Router) makes the process die every time it reaches it — a panic in a
// goroutine the stage started, then the parent's SIGKILL while the stage
// runs, then its own SIGKILL, and so on — is dropped as
// dropped_retries_exhausted, with a reason naming the crash, after at most
// MaxAttempts (5) deaths, over 9 child processes (8 restarts); every other
// message, before and after it, in its group and elsewhere, has exactly one
// outcome and is answered (or ignored) as usual.
func TestPoisonMessageCrashes(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("child process")
	}
	if testing.Short() {
		t.Skip("spawns and kills child processes")
	}
	const children = 9
	var (
		events   []channel.Event
		answered []bool
		batches  = make([][]int, children)
		poison   int
	)
	add := func(run int, chat channel.Chat, from channel.Sender, mention bool, extra string) int {
		i := len(events)
		ev := channel.Event{Platform: "loop", BotID: "bot", Kind: channel.KindMessage, Chat: chat,
			MessageID: fmt.Sprintf("m%03d", i), Sender: from,
			Segments: []channel.Segment{channel.Text(fmt.Sprintf("message %d%s", i, extra))}}
		if mention {
			ev.Segments = append([]channel.Segment{channel.Mention("bot")}, ev.Segments...)
		}
		events = append(events, ev)
		answered = append(answered, mention || chat.Kind == channel.Private)
		batches[run] = append(batches[run], i)
		return i
	}
	pg := channel.Chat{Kind: channel.Group, ID: "pg"}
	g5 := channel.Chat{Kind: channel.Group, ID: "g5"}
	u := func(n int) channel.Sender {
		return channel.Sender{ID: fmt.Sprintf("u%d", n), Name: fmt.Sprintf("User %d", n)}
	}
	dm := func(n int) (channel.Chat, channel.Sender) {
		s := channel.Sender{ID: fmt.Sprintf("p%d", n), Name: fmt.Sprintf("Person %d", n)}
		return channel.Chat{Kind: channel.Private, ID: s.ID}, s
	}
	mix := func(run, n int) {
		for j := range n {
			switch j % 4 {
			case 0:
				add(run, pg, u(j%3), true, "")
			case 1:
				add(run, pg, u(j%3+1), false, "") // chatter the router ignores
			case 2:
				c, s := dm(run % 3)
				add(run, c, s, false, "")
			default:
				add(run, g5, u(j%3), true, "")
			}
		}
	}
	mix(0, 6)
	poison = add(0, pg, u(2), false, ": this one is poison")
	mix(0, 4)
	for run := 1; run < children; run++ {
		mix(run, 4)
	}
	isAnswered := func(i int) bool { return answered[i] }

	began := time.Now()
	pl := newPlatform(t, events)
	poisonKey := events[poison].Key()
	deaths := 0
	for run := range children {
		pl.release(batches[run]...)
		how := poisonDeaths[min(deaths, len(poisonDeaths)-1)]
		c := pl.startChild(run, crashModeEnv+"=poison", poisonDeathEnv+"="+how)
		killed, stopped := false, false
		deadline := time.Now().Add(time.Minute)
		for i := 0; !c.exited(); i++ {
			pl.mu.Lock()
			reached := pl.poisoned[run]
			pl.mu.Unlock()
			switch {
			case reached && how == "parent" && !killed:
				time.Sleep(poisonGrace) // the stage is still running
				c.kill()
				killed = true
			case !reached && pl.settled(isAnswered, i%25 == 24):
				pl.stop(c)
				stopped = true
			case time.Now().After(deadline):
				what, _ := pl.unsettled(isAnswered)
				t.Fatalf("child %d: still running after a minute (%s); log tail:\n%s", run, what, pl.logTail())
			default:
				time.Sleep(20 * time.Millisecond)
			}
		}
		<-c.done
		pl.drained()
		pl.mu.Lock()
		reached := pl.poisoned[run]
		pl.mu.Unlock()
		if stopped {
			t.Logf("child %d: everything released so far settled; stopped", run)
			continue
		}
		require.True(t, reached, "child %d died without reaching the poison message: %v; log tail:\n%s", run, c.err, pl.logTail())
		deaths++
		t.Logf("child %d: died on the poison message (%s): %v", run, how, c.err)
	}
	pl.waitSettled(isAnswered, time.Second) // the last child settled everything

	recs := pl.records()
	rec := recs[poisonKey]
	t.Logf("poison message: %d deaths, %d attempts; outcome %s: %s (%s in all)", deaths, rec.Attempts, rec.Outcome.Code,
		rec.Outcome.Reason, time.Since(began).Round(time.Millisecond))
	require.Equal(t, inbound.DroppedRetriesExhausted, rec.Outcome.Code)
	require.Contains(t, rec.Outcome.Reason, "crashed")
	require.LessOrEqual(t, deaths, inbound.DefaultMaxAttempts, "dropped after at most MaxAttempts deaths")
	require.GreaterOrEqual(t, deaths, 2, "the panic and the parent's kill both happened")
	pl.mu.Lock()
	require.Len(t, pl.poisoned, deaths, "no stage ran on the poison message once it was past MaxAttempts")
	pl.mu.Unlock()
	log, err := os.ReadFile(pl.logPath())
	require.NoError(t, err)
	require.Contains(t, string(log), "poison message: a goroutine the stage started panicked", "the first death was the panic")

	for i, ev := range events {
		if i == poison {
			continue
		}
		want := route.IgnoredChatScore
		if answered[i] {
			want = outcome.Replied
		}
		require.Equal(t, want, recs[ev.Key()].Outcome.Code, "message %d (%s): %+v", i, ev.Chat, recs[ev.Key()])
	}
	pl.checkDeliveries(isAnswered)
}

// logBuffer is an io.Writer for a logger that tests read while the
// pipeline writes.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEmbedderPanicsAreChargedRetries: an embedder's Router and Reviewer
// that panic (on some messages) do not take the process down: each panic
// is logged with its stack and becomes a charged retry (5, 10, 20, 40 s
// apart, on the fake clock), the message ends dropped_retries_exhausted
// after MaxAttempts with the panic as its last error, and the other
// messages are answered meanwhile.
func TestEmbedderPanicsAreChargedRetries(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	var routerPanics, reviewerPanics atomic.Int32
	h := newHarness(t, agenttest.New().Otherwise(agenttest.Reply("sure thing")), func(o *persona.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		o.Router = route.RouterFunc(func(_ context.Context, in route.Input) (route.Decision, error) {
			if strings.Contains(in.Event.Text(), "router-bomb") {
				routerPanics.Add(1)
				panic("router exploded on " + in.Event.MessageID)
			}
			return route.Decision{Code: route.IgnoredChatScore, Reason: "small talk"}, nil
		})
		o.Reviewer = outbound.ReviewerFunc(func(ctx context.Context, p outbound.Proposal) (outbound.Verdict, error) {
			if strings.Contains(p.Event.Text(), "review-bomb") {
				reviewerPanics.Add(1)
				words := strings.Fields(p.Text)
				_ = words[len(words)+len(p.Event.MessageID)] // a runtime error: index out of range
			}
			return outbound.BasicReviewer.Review(ctx, p)
		})
	})
	ctx := t.Context()
	dmBob := channel.Chat{Kind: channel.Private, ID: "bob"}
	require.Equal(t, outcome.Replied, h.outcome(h.say(dmAlice, alice, "hello")).Code)
	require.Equal(t, route.IgnoredChatScore, h.outcome(h.say(group1, alice, "nice weather")).Code)

	rb := h.say(group1, bob, "router-bomb: what now")
	vb := h.say(dmBob, bob, "review-bomb: tell me something")
	for attempt, delay := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second} {
		for _, ev := range []channel.Event{rb, vb} {
			require.Eventually(t, func() bool {
				r, err := h.p.Lookup(ctx, ev.Key())
				return err == nil && r.Status == inbound.StatusPending && r.Attempts == attempt+1
			}, 10*time.Second, 5*time.Millisecond, "attempt %d of %s", attempt+1, ev.Text())
			r, err := h.p.Lookup(ctx, ev.Key())
			require.NoError(t, err)
			require.Contains(t, r.LastError, persona.ErrPanic.Error(), "attempt %d of %s", attempt+1, ev.Text())
			require.Equal(t, h.clk.Now().Add(delay), r.AvailableAt, "attempt %d of %s", attempt+1, ev.Text())
		}
		// Meanwhile the pipeline goes on: others are answered and ignored.
		c := channel.Chat{Kind: channel.Private, ID: fmt.Sprintf("c%d", attempt)}
		require.Equal(t, outcome.Replied, h.outcome(h.say(c, channel.Sender{ID: c.ID, Name: "Carol"}, "still there?")).Code)
		require.Equal(t, route.IgnoredChatScore, h.outcome(h.say(group1, alice, fmt.Sprintf("chatter %d", attempt))).Code)
		h.clk.Advance(delay)
		h.p.Wake()
	}
	for ev, cause := range map[*channel.Event]string{&rb: "router exploded on " + rb.MessageID, &vb: "index out of range"} {
		o := h.outcome(*ev)
		require.Equal(t, inbound.DroppedRetriesExhausted, o.Code, ev.Text())
		require.Contains(t, o.Reason, "5 attempts", ev.Text())
		require.Contains(t, o.Reason, persona.ErrPanic.Error(), ev.Text())
		require.Contains(t, o.Reason, cause, ev.Text())
		r, err := h.p.Lookup(ctx, ev.Key())
		require.NoError(t, err)
		require.Equal(t, inbound.DefaultMaxAttempts, r.Attempts, ev.Text())
	}
	require.EqualValues(t, 5, routerPanics.Load())
	require.EqualValues(t, 5, reviewerPanics.Load())
	require.Equal(t, outcome.Replied, h.outcome(h.say(dmAlice, alice, "and now?")).Code)
	for _, s := range h.ch.Sent() {
		require.NotEqual(t, "bob", s.Out.Chat.ID, "nothing went to the message whose review panicked")
	}

	// Each panic was logged with its stack.
	out := logs.String()
	require.Equal(t, 10, strings.Count(out, `"msg":"turn panicked"`), out)
	require.Contains(t, out, "router exploded on "+rb.MessageID)
	require.Contains(t, out, "index out of range")
	require.Contains(t, out, "goroutine ", "the stack is logged")
	require.Contains(t, out, "TestEmbedderPanicsAreChargedRetries", "the stack reaches the embedder's code")
}
