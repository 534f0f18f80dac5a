package outbound_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

// TestSendFaultTable drives every platform fault through the sender: the
// second chunk of a two-chunk reply fails, the error is classified the way
// the caller needs, and a retry of the turn (what the queue does for
// retryable classes) never sends a chunk twice.
func TestSendFaultTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		err        error
		private    bool // no lane (lanes apply to groups)
		class      channel.ErrorClass
		definitive bool
		snooze     bool // a *SnoozeError from the group lane
		retryAfter time.Duration
	}{
		{name: "429 with retry-after over the inline cap", err: &channel.RateLimitedError{RetryAfter: 30 * time.Second}, class: channel.ClassRateLimited, retryAfter: 30 * time.Second},
		{name: "5xx in a group: lane backoff", err: errors.New("http 502 bad gateway"), class: channel.ClassRateLimited, snooze: true},
		{name: "5xx in a private chat: retry", err: errors.New("http 500"), private: true, class: channel.ClassTransient},
		{name: "definitive 403 rejection", err: &channel.RejectedError{Code: "403", Reason: "bot was blocked by the user"}, class: channel.ClassRejected, definitive: true},
		{name: "kicked", err: channel.ErrKicked, class: channel.ClassKicked, definitive: true},
		{name: "muted", err: &channel.MutedError{Until: t0.Add(time.Hour)}, class: channel.ClassMuted, definitive: true},
		{name: "offline", err: channel.ErrOffline, class: channel.ClassOffline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			clk := clock.NewFake(t0)
			ch := chantest.New(chantest.Config{Clock: clk})
			led := newLedger()
			lanes, err := outbound.NewLanes(outbound.LanesConfig{State: &outbound.MemoryState{}, Clock: clk})
			require.NoError(t, err)
			armed := true
			s := newSender(t, outbound.SenderConfig{Ledger: led, Clock: clk, NoPacing: true, Lanes: lanes,
				AfterSend: func(_ context.Context, _ outbound.Reply, n int, _ outbound.Chunk, _ channel.Receipt) {
					if n == 0 && armed {
						armed = false
						ch.FailNext(1, tc.err)
					}
				}})
			r := reply(ch, "t1", "one[persona-msg]two")
			if tc.private {
				r.Chat = channel.Chat{Kind: channel.Private, ID: "u1"}
				r.SessionKey = channel.SessionKey("", ch.Name(), ch.BotID(), r.Chat)
			}
			d, err := s.Send(ctx, r)
			var se *outbound.SendError
			require.ErrorAs(t, err, &se)
			require.Equal(t, 1, se.Slot)
			require.Equal(t, []string{"out-1"}, se.Delivered, "the delivered chunk is reported")
			require.Equal(t, []string{"out-1"}, d.MessageIDs)
			require.Equal(t, tc.class, channel.Classify(err))
			require.Equal(t, tc.definitive, channel.Classify(err).Definitive())
			var sz *outbound.SnoozeError
			require.Equal(t, tc.snooze, errors.As(err, &sz))
			var rl *channel.RateLimitedError
			if tc.retryAfter > 0 {
				require.ErrorAs(t, err, &rl)
				require.Equal(t, tc.retryAfter, rl.RetryAfter, "the caller snoozes until RetryAfter")
			}
			require.Equal(t, []string{"one"}, texts(ch.Sent()))
			require.NotContains(t, led.slotsOf("t1"), 1, "the failed chunk's intent is cleared")

			if tc.definitive {
				return // never retried: the caller records dropped_send_rejected
			}
			if tc.snooze {
				// The lane says wait: a retry before the lane's time sends
				// nothing and snoozes again.
				_, err := s.Send(ctx, r)
				require.ErrorAs(t, err, &sz)
				require.ErrorIs(t, err, channel.ErrRateLimited)
				require.Len(t, ch.Sent(), 1)
				clk.Set(sz.Until)
			}
			d, err = s.Send(ctx, r)
			require.NoError(t, err)
			require.Equal(t, []string{"one", "two"}, texts(ch.Sent()), "nothing sent twice")
			require.Equal(t, []string{"out-1", "out-2"}, d.MessageIDs)
			require.Equal(t, 1, d.Skipped)
			d, err = s.Send(ctx, r)
			require.NoError(t, err)
			require.Len(t, ch.Sent(), 2)
			require.Equal(t, 2, d.Skipped)
		})
	}
}

func TestSendLaneDropCooldown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(t0)
	ch := chantest.New(chantest.Config{Clock: clk})
	lanes, err := outbound.NewLanes(outbound.LanesConfig{State: &outbound.MemoryState{}, Clock: clk})
	require.NoError(t, err)
	s := newSender(t, outbound.SenderConfig{Ledger: newLedger(), Clock: clk, NoPacing: true, Lanes: lanes})
	ch.FailNext(100, errors.New("http 503"))
	for {
		d, err := s.Send(ctx, reply(ch, "t1", "hello"))
		if d.Stopped {
			require.NoError(t, err)
			require.Equal(t, outbound.DroppedOutboundDelivery, d.Code)
			break
		}
		var sz *outbound.SnoozeError
		require.ErrorAs(t, err, &sz)
		clk.Set(sz.Until)
		require.Less(t, clk.Now().Sub(t0), 50*time.Minute)
	}
	// In the cooldown every send fails fast.
	d, err := s.Send(ctx, reply(ch, "t2", "hello"))
	require.NoError(t, err)
	require.True(t, d.Stopped)
	require.Equal(t, outbound.DroppedOutboundDelivery, d.Code)
	require.Empty(t, ch.Sent())
}

// fwdChannel adds channel.ForwardSender to a chantest channel.
type fwdChannel struct {
	*chantest.Channel
	mu    sync.Mutex
	fail  error
	cards [][]channel.ForwardNode
}

func (f *fwdChannel) SendForward(_ context.Context, _ channel.Chat, nodes []channel.ForwardNode) (channel.Receipt, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return channel.Receipt{}, f.fail
	}
	f.cards = append(f.cards, nodes)
	return channel.Receipt{MessageIDs: []string{"card-1"}}, nil
}

func TestSendMergedForward(t *testing.T) {
	t.Parallel()
	five := "a[persona-msg]b[persona-msg]c[persona-msg]d[persona-msg]e"
	tests := []struct {
		name      string
		text      string
		cfg       outbound.ForwardConfig
		fail      error
		card      bool
		chunks    int
		stoppedAs outcome.Code
	}{
		{name: "five chunks: one card", text: five, card: true},
		{name: "900 characters: one card", text: strings.Repeat("x", 500) + "[persona-msg]" + strings.Repeat("y", 400), card: true},
		{name: "under the threshold: chunks", text: "a[persona-msg]b", chunks: 2},
		{name: "turned off: chunks", text: five, cfg: outbound.ForwardConfig{Off: true}, chunks: 5},
		{name: "card fails: falls back to chunks", text: five, fail: errors.New("http 500"), chunks: 5},
		{name: "unsafe text: nothing sent", text: five, stoppedAs: outbound.DroppedForwardUnsafe,
			cfg: outbound.ForwardConfig{Check: func(context.Context, string) (bool, error) { return false, nil }}},
		{name: "safety check error: chunks", text: five, chunks: 5,
			cfg: outbound.ForwardConfig{Check: func(context.Context, string) (bool, error) { return false, errors.New("audit down") }}},
		{name: "safe text: card", text: five, card: true,
			cfg: outbound.ForwardConfig{Check: func(_ context.Context, s string) (bool, error) { return strings.Contains(s, "e"), nil }}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ch := &fwdChannel{Channel: chantest.New(chantest.Config{}), fail: tc.fail}
			led := newLedger()
			var after atomic.Int32
			s := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true, Forward: tc.cfg,
				AfterSend: func(context.Context, outbound.Reply, int, outbound.Chunk, channel.Receipt) { after.Add(1) }})
			r := reply(ch.Channel, "t1", tc.text)
			r.Channel = ch
			d, err := s.Send(t.Context(), r)
			require.NoError(t, err)
			if tc.stoppedAs != "" {
				require.True(t, d.Stopped)
				require.Equal(t, tc.stoppedAs, d.Code)
				require.Empty(t, ch.Sent())
				require.Empty(t, ch.cards)
				return
			}
			require.Equal(t, tc.card, d.Forwarded)
			if tc.card {
				require.Len(t, ch.cards, 1)
				require.Empty(t, ch.Sent())
				require.Equal(t, []string{"card-1"}, d.MessageIDs)
				require.Equal(t, outbound.SlotSent, led.slotsOf("t1")[outbound.ForwardSlot].State)
				require.EqualValues(t, len(ch.cards[0]), after.Load(), "history gets every chunk")
				// A retry sends nothing.
				d, err = s.Send(t.Context(), r)
				require.NoError(t, err)
				require.True(t, d.Forwarded)
				require.Len(t, ch.cards, 1)
				return
			}
			require.Len(t, ch.Sent(), tc.chunks)
			require.NotContains(t, led.slotsOf("t1"), outbound.ForwardSlot)
		})
	}
}

func TestSendExitSteps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      outbound.SenderConfig
		edit     func(r *outbound.Reply)
		stopped  outcome.Code
		texts    []string
		replyTo  string
		mentions []string
	}{
		{name: "secrets masked", cfg: outbound.SenderConfig{Secrets: []string{"s3cr3t-value"}},
			edit:  func(r *outbound.Reply) { r.Text = "the key is s3cr3t-value and sk-abcdefghijklmnopqrstuv" },
			texts: []string{"the key is [redacted] and [redacted]"}, replyTo: "in-1", mentions: []string{"u1"}},
		{name: "control markers stripped", edit: func(r *outbound.Reply) { r.Text = "hi[[SILENT]] there[[PAUSE_30M]]" }, texts: []string{"hi there"}, replyTo: "in-1", mentions: []string{"u1"}},
		{name: "markdown to plain", edit: func(r *outbound.Reply) { r.Text = "**bold** [a](https://x.dev)" }, texts: []string{"bold a (https://x.dev)"}, replyTo: "in-1", mentions: []string{"u1"}},
		{name: "policy deny", cfg: outbound.SenderConfig{Policy: outbound.SendPolicy{Rules: []outbound.PolicyRule{{Kind: channel.Group}}}},
			stopped: outbound.IgnoredSendPolicy},
		{name: "hook cancels", cfg: outbound.SenderConfig{Hooks: []outbound.BeforeSend{func(context.Context, *outbound.Message) error {
			return errors.New("moderation")
		}}}, stopped: outbound.IgnoredCancelledByHook},
		{name: "hook rewrites, result masked", cfg: outbound.SenderConfig{Hooks: []outbound.BeforeSend{func(_ context.Context, m *outbound.Message) error {
			m.Text = strings.ToUpper(m.Text) + " password=hunter2"
			return nil
		}}}, texts: []string{"HELLO password=[redacted]"}, replyTo: "in-1", mentions: []string{"u1"}},
		{name: "guard stops before the first chunk", edit: func(r *outbound.Reply) {
			r.Guard = func(context.Context) (outcome.Code, string) { return "superseded_follow_up", "newer turn answers" }
		}, stopped: "superseded_follow_up"},
		{name: "guard passes", edit: func(r *outbound.Reply) {
			r.Guard = func(context.Context) (outcome.Code, string) { return "", "" }
		}, texts: []string{"hello"}, replyTo: "in-1", mentions: []string{"u1"}},
		{name: "reply marker for the current message", edit: func(r *outbound.Reply) {
			r.Text, r.ReplyTo, r.CurrentMessageID = "[persona-reply:in-7]yes[persona-at:u5]", "", "in-7"
		}, texts: []string{"yes"}, replyTo: "in-7", mentions: []string{"u1", "u5"}},
		{name: "reply marker for an unknown message ignored", edit: func(r *outbound.Reply) {
			r.Text = "[persona-reply:in-99]yes"
		}, texts: []string{"yes"}, replyTo: "in-1", mentions: []string{"u1"}},
		{name: "reply marker for a message in history", edit: func(r *outbound.Reply) {
			r.Text, r.KnownMessage = "[persona-reply:h-3]yes", func(id string) bool { return id == "h-3" }
		}, texts: []string{"yes"}, replyTo: "h-3", mentions: []string{"u1"}},
		{name: "recalled trigger: no quote", edit: func(r *outbound.Reply) { r.TriggerRecalled = true },
			texts: []string{"hello"}, mentions: []string{"u1"}},
		{name: "targets another participant: neither", edit: func(r *outbound.Reply) { r.TargetsOther = true },
			texts: []string{"hello"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ch := chantest.New(chantest.Config{})
			led := newLedger()
			cfg := tc.cfg
			cfg.Ledger, cfg.NoPacing = led, true
			s := newSender(t, cfg)
			r := reply(ch, "t1", "hello")
			r.ReplyTo, r.Mentions = "in-1", []string{"u1"}
			if tc.edit != nil {
				tc.edit(&r)
			}
			d, err := s.Send(t.Context(), r)
			require.NoError(t, err)
			if tc.stopped != "" {
				require.True(t, d.Stopped)
				require.Equal(t, tc.stopped, d.Code)
				require.NotEmpty(t, d.Reason)
				require.Empty(t, ch.Sent())
				require.Empty(t, led.slotsOf("t1"))
				return
			}
			require.False(t, d.Stopped)
			sent := ch.Sent()
			require.Equal(t, tc.texts, texts(sent))
			require.Equal(t, tc.replyTo, sent[0].Out.ReplyTo)
			require.Equal(t, tc.mentions, sent[0].Out.Mentions)
		})
	}
}

func TestSendGuardOnlyBeforeTheFirstChunk(t *testing.T) {
	t.Parallel()
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	s := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true,
		AfterSend: func(_ context.Context, _ outbound.Reply, n int, _ outbound.Chunk, _ channel.Receipt) {
			if n == 0 {
				ch.FailNext(1, nil)
			}
		}})
	var guards atomic.Int32
	r := reply(ch, "t1", "a[persona-msg]b")
	r.Guard = func(context.Context) (outcome.Code, string) {
		guards.Add(1)
		return "", ""
	}
	_, err := s.Send(t.Context(), r)
	require.Error(t, err)
	r.Guard = func(context.Context) (outcome.Code, string) {
		guards.Add(1)
		return "superseded_follow_up", "too late"
	}
	d, err := s.Send(t.Context(), r)
	require.NoError(t, err)
	require.False(t, d.Stopped, "a reply that has started sending finishes")
	require.Equal(t, []string{"a", "b"}, texts(ch.Sent()))
	require.EqualValues(t, 1, guards.Load())
}

func TestSendMediaRetriesOnTheClock(t *testing.T) {
	t.Parallel()
	for _, fails := range []int{2, 3} {
		clk := clock.NewFake(t0)
		ch := chantest.New(chantest.Config{Clock: clk})
		var renewals atomic.Int32
		s := newSender(t, outbound.SenderConfig{Ledger: newLedger(), Clock: clk, NoPacing: true,
			RenewMedia: func(_ context.Context, m []channel.Media) ([]channel.Media, error) {
				n := renewals.Add(1)
				m[0].URL = "https://media.local/a.png?lease=" + strconv.Itoa(int(n))
				return m, nil
			}})
		r := reply(ch, "t1", "look")
		r.Media = []channel.Media{{URL: "https://media.local/a.png", MIME: "image/png"}}
		ch.FailNext(fails, channel.ErrMediaInvalid)
		type res struct {
			d   outbound.Delivery
			err error
		}
		done := make(chan res, 1)
		go func() {
			d, err := s.Send(t.Context(), r)
			done <- res{d, err}
		}()
		eventually(t, "the first media retry timer", func() bool { return clk.Pending() == 1 })
		clk.Advance(699 * time.Millisecond)
		require.Equal(t, 1, clk.Pending(), "700 ms × attempt 1")
		clk.Advance(time.Millisecond)
		eventually(t, "the second media retry timer", func() bool { return clk.Pending() == 1 })
		clk.Advance(1400 * time.Millisecond)
		out := <-done
		require.EqualValues(t, 3, renewals.Load(), "links renewed before every attempt")
		if fails == 3 {
			require.Equal(t, channel.ClassMediaInvalid, channel.Classify(out.err), "3 attempts in all")
			require.Empty(t, ch.Sent())
			continue
		}
		require.NoError(t, out.err)
		require.Len(t, ch.Sent(), 1)
		require.Equal(t, "https://media.local/a.png?lease=3", ch.Sent()[0].Out.Media[0].URL)
	}
}

func TestSendShortRateLimitWaitsInline(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	ch := chantest.New(chantest.Config{Clock: clk})
	s := newSender(t, outbound.SenderConfig{Ledger: newLedger(), Clock: clk, NoPacing: true})
	ch.FailNext(1, &channel.RateLimitedError{RetryAfter: 6 * time.Second})
	done := make(chan error, 1)
	go func() {
		_, err := s.Send(t.Context(), reply(ch, "t1", "hello"))
		done <- err
	}()
	eventually(t, "the inline wait", func() bool { return clk.Pending() == 1 })
	clk.Advance(6 * time.Second)
	require.NoError(t, <-done)
	require.Len(t, ch.Sent(), 1)
	require.Equal(t, t0.Add(6*time.Second), ch.Sent()[0].At)
}

func TestSendReconcilesAnIntentThroughHistory(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	st := &outbound.MemoryState{}
	s := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true, State: st})
	r := reply(ch, "t1", "ignored")
	// A previous process sent chunk 0 and crashed before marking it sent.
	_, err := led.SaveDraft(ctx, outbound.Draft{TurnID: "t1", SessionKey: r.SessionKey, Chat: groupChat,
		Code: outcome.Replied, Chunks: []outbound.Chunk{{Text: "one"}, {Text: "two"}}})
	require.NoError(t, err)
	require.NoError(t, led.MarkIntent(ctx, "t1", 0, chunkFP(r, 0, "one")))
	_, err = ch.Send(ctx, channel.Outgoing{Chat: groupChat, Text: "one"})
	require.NoError(t, err)

	d, err := s.Send(ctx, r)
	require.NoError(t, err)
	require.Equal(t, []string{"one", "two"}, texts(ch.Sent()))
	require.Equal(t, []string{"out-1", "out-2"}, d.MessageIDs)
	sl := led.slotsOf("t1")[0]
	require.Equal(t, outbound.SlotSent, sl.State, "found in history: marked sent")
	require.Equal(t, []string{"out-1"}, sl.MessageIDs)
	s0, ok, _ := st.GetState(ctx, r.SessionKey, "", outbound.StateLastBotMessage)
	require.True(t, ok, "the bot's last message time is recorded")
	require.NotEmpty(t, s0.Value)
}

func TestSendResendsAnIntentMissingFromHistory(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	s := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true})
	r := reply(ch, "t1", "ignored")
	// A previous process wrote the intent of chunk 0 and crashed before the
	// platform call: the chat history does not have it.
	_, err := led.SaveDraft(ctx, outbound.Draft{TurnID: "t1", SessionKey: r.SessionKey, Chat: groupChat,
		Code: outcome.Replied, Chunks: []outbound.Chunk{{Text: "one"}, {Text: "two"}}})
	require.NoError(t, err)
	require.NoError(t, led.MarkIntent(ctx, "t1", 0, chunkFP(r, 0, "one")))

	d, err := s.Send(ctx, r)
	require.NoError(t, err)
	require.Equal(t, []string{"one", "two"}, texts(ch.Sent()), "sent again, once")
	require.Equal(t, []string{"out-1", "out-2"}, d.MessageIDs)
	require.Equal(t, outbound.SlotSent, led.slotsOf("t1")[0].State)
}

func TestTypingController(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	ch := chantest.New(chantest.Config{Clock: clk})
	tc := outbound.StartTyping(t.Context(), clk, ch, groupChat, 5*time.Second, 12*time.Second)
	require.Len(t, ch.Typings(), 1, "shown at once")
	eventually(t, "keepalive timer", func() bool { return clk.Pending() == 1 })
	clk.Advance(5 * time.Second)
	eventually(t, "second keepalive", func() bool { return len(ch.Typings()) == 2 && clk.Pending() == 1 })
	clk.Advance(5 * time.Second)
	eventually(t, "third keepalive", func() bool { return len(ch.Typings()) == 3 && clk.Pending() == 1 })
	clk.Advance(5 * time.Second) // 15 s > TTL 12 s: ends on its own
	tc.Stop()
	tc.Stop()
	require.Len(t, ch.Typings(), 3)
	require.Zero(t, clk.Pending())

	// Stopped on the exit path of a send.
	s := newSender(t, outbound.SenderConfig{Ledger: newLedger(), Clock: clk, NoPacing: true})
	r := reply(ch, "t9", "hi")
	r.Typing = true
	_, err := s.Send(t.Context(), r)
	require.NoError(t, err)
	require.Len(t, ch.Typings(), 4)
	require.Zero(t, clk.Pending(), "the keepalive is stopped")
}

// chunkFP is the ledger fingerprint the exit computes for chunk n of r.
func chunkFP(r outbound.Reply, n int, text string) string {
	p, err := channel.ParseSessionKey(r.SessionKey)
	if err != nil {
		panic(err)
	}
	return outbound.Fingerprint(p.Platform, p.BotID, r.Chat, n, outbound.Chunk{Text: text})
}

// A send whose fate is unknown (channel.ErrUnconfirmed: a relayed send
// whose holding process died) is not a platform failure: the group's lane
// does not back off, the chunk's intent is kept, and the retried turn
// looks for the chunk in the chat before it sends it.
func TestSendUnconfirmedKeepsTheLaneOpen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(t0)
	ch := chantest.New(chantest.Config{Clock: clk})
	led := newLedger()
	lanes, err := outbound.NewLanes(outbound.LanesConfig{State: &outbound.MemoryState{}, Clock: clk})
	require.NoError(t, err)
	armed := true
	s := newSender(t, outbound.SenderConfig{Ledger: led, Clock: clk, NoPacing: true, Lanes: lanes,
		AfterSend: func(_ context.Context, _ outbound.Reply, n int, _ outbound.Chunk, _ channel.Receipt) {
			if n == 0 && armed {
				armed = false
				ch.FailNext(1, channel.ErrUnconfirmed)
			}
		}})
	r := reply(ch, "t1", "one[persona-msg]two")
	_, err = s.Send(ctx, r)
	require.ErrorIs(t, err, channel.ErrUnconfirmed)
	var sz *outbound.SnoozeError
	require.False(t, errors.As(err, &sz), "no lane backoff")
	st, err := lanes.Check(ctx, r.SessionKey, outbound.LaneText)
	require.NoError(t, err)
	require.False(t, st.Wait || st.Drop)
	require.Contains(t, led.slotsOf("t1"), 1, "the unconfirmed chunk's intent is kept")

	// The retry reads the chat: the chunk is not there, so it goes out.
	d, err := s.Send(ctx, r)
	require.NoError(t, err)
	require.Equal(t, []string{"one", "two"}, texts(ch.Sent()))
	require.Len(t, d.MessageIDs, 2)
}
