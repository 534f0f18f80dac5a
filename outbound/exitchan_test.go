package outbound_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outbound"
)

func testScope(t *testing.T) *agent.Scope {
	t.Helper()
	sc, err := agent.NewScope("s", []byte("0123456789abcdef0123456789abcdef"), nil)
	require.NoError(t, err)
	sc.SetBot("1499449412")
	for id, name := range map[string]string{"1928374650": "阿杰", "2734019856": "Bea", "3000000001": "Cy Lee"} {
		sc.User(id)
		sc.Name(id, name)
	}
	return sc
}

func TestResolveMentions(t *testing.T) {
	t.Parallel()
	sc := testScope(t)
	jie, bea := sc.User("1928374650"), sc.User("2734019856")
	for _, tc := range []struct {
		name     string
		text     string
		mentions []string
		wantText string
		want     []string
	}{
		{"marker with id", "[persona-at:1928374650] 你好", nil, "你好", []string{"1928374650"}},
		{"marker with alias", "[persona-at:" + jie + "] hi", nil, "hi", []string{"1928374650"}},
		{"plain @id leading", "@1928374650 hi there", nil, "hi there", []string{"1928374650"}},
		{"plain @alias leading", "@" + jie + " @" + bea + " hi", nil, "hi", []string{"1928374650", "2734019856"}},
		{"@name leading", "@Bea what do you think", nil, "what do you think", []string{"2734019856"}},
		{"@name with space", "@Cy Lee ok", nil, "ok", []string{"3000000001"}},
		{"inline @id becomes the name", "I agree with @1928374650, really", nil, "I agree with @阿杰, really", nil},
		{"inline alias becomes the name", "ask " + bea + " about it", nil, "ask Bea about it", nil},
		{"bare id typed", "阿杰的号是 1928374650", nil, "阿杰的号是 阿杰", nil},
		{"given mentions kept, aliases mapped", "hi", []string{jie}, "hi", []string{"1928374650"}},
		{"no duplicate", "@1928374650 hi", []string{"1928374650"}, "hi", []string{"1928374650"}},
		{"@all never from model text", "[persona-at:all] @all hi", nil, "@all hi", nil},
		{"unknown numbers stay", "call 5551234567 now", nil, "call 5551234567 now", nil},
		{"short numbers stay", "I have 12 apples", nil, "I have 12 apples", nil},
		{"reply marker dropped", "[persona-reply:123] ok", nil, "ok", nil},
		{"spacing tidied", "@1928374650   hello  ,  world", nil, "hello, world", []string{"1928374650"}},
		{"email is not a mention", "mail bea@example.com", nil, "mail bea@example.com", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, m := outbound.ResolveMentions(tc.text, tc.mentions, sc)
			require.Equal(t, tc.wantText, text)
			require.Equal(t, tc.want, m)
		})
	}
	// Without a scope only markers are known.
	text, m := outbound.ResolveMentions("[persona-at:42] @1928374650 hi", nil, nil)
	require.Equal(t, "@1928374650 hi", text)
	require.Equal(t, []string{"42"}, m)
}

// recordedSends collects what an Exit reports as delivered.
type recordedSends struct {
	mu   sync.Mutex
	sent []outbound.Sent
}

func (r *recordedSends) add(_ context.Context, s outbound.Sent) {
	r.mu.Lock()
	r.sent = append(r.sent, s)
	r.mu.Unlock()
}

func (r *recordedSends) texts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.sent {
		out = append(out, s.Out.Text)
	}
	return out
}

// A Sender an embedder writes (here: one Send per reply through
// Reply.Channel) gets masking, mention resolution, the ledger and the
// history report from the exit.
func TestExitDutiesHoldForACustomSender(t *testing.T) {
	t.Parallel()
	ctx := agent.WithScope(t.Context(), testScope(t))
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	var rec recordedSends
	exit, err := outbound.NewExit(outbound.ExitConfig{Ledger: led, Secrets: []string{"hunter2-secret"}, Delivered: rec.add})
	require.NoError(t, err)
	custom := outbound.SenderFunc(func(ctx context.Context, r outbound.Reply) (outbound.Delivery, error) {
		rc, err := r.Channel.Send(ctx, channel.Outgoing{Chat: r.Chat, Text: r.Text})
		return outbound.Delivery{MessageIDs: rc.MessageIDs, Chunks: 1, Code: r.Code}, err
	})
	r := reply(ch, "t1", "@1928374650 the password is hunter2-secret [[SILENT]]")
	r.Channel = exit.Bind(ch, r.TurnID, r.SessionKey, true)
	d, err := custom.Send(ctx, r)
	require.NoError(t, err)
	require.Equal(t, []string{"out-1"}, d.MessageIDs)
	sent := ch.Sent()
	require.Len(t, sent, 1)
	require.Equal(t, "the password is "+outbound.SecretMask, sent[0].Out.Text)
	require.Equal(t, []string{"1928374650"}, sent[0].Out.Mentions)
	require.NotEmpty(t, sent[0].Out.IdempotencyKey)
	require.Equal(t, []string{"the password is " + outbound.SecretMask}, rec.texts())
	require.Equal(t, outbound.SlotSent, led.slotsOf("t1")[0].State)

	// The same reply again (a retried turn): the slot is not sent twice.
	r.Channel = exit.Bind(ch, r.TurnID, r.SessionKey, false)
	_, err = custom.Send(ctx, r)
	require.NoError(t, err)
	require.Len(t, ch.Sent(), 1)

	// Another turn saying the same words in the same chat and slot is
	// another chunk: a platform that deduplicates by the key must not
	// swallow it.
	other := reply(ch, "t2", "@1928374650 the password is hunter2-secret [[SILENT]]")
	other.Channel = exit.Bind(ch, other.TurnID, other.SessionKey, true)
	_, err = custom.Send(ctx, other)
	require.NoError(t, err)
	require.Len(t, ch.Sent(), 2)
	require.NotEqual(t, sent[0].Out.IdempotencyKey, ch.Sent()[1].Out.IdempotencyKey)
	require.Equal(t, led.slotsOf("t1")[0].Fingerprint, led.slotsOf("t2")[0].Fingerprint, "the same words: the same fingerprint")
}

// An intent a crash left behind is looked for back to its time, across
// more messages than one page holds: found, it is not sent again.
func TestExitReconcilesAcrossABusyChat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		delivered bool
		newer     int
	}{
		{"found behind 30 newer messages", true, 30},
		{"found behind 250 newer messages", true, 250},
		{"absent, 250 newer messages", false, 250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			clk := clock.NewFake(t0)
			ch := chantest.New(chantest.Config{Clock: clk})
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			go func() {
				_ = ch.Run(runCtx, channel.SinkFunc(func(context.Context, channel.Event) error { return nil }))
			}()
			led := newLedger()
			exit, err := outbound.NewExit(outbound.ExitConfig{Ledger: led, Clock: clk})
			require.NoError(t, err)
			r := reply(ch, "t1", "")
			// Old chat traffic, then the intent.
			for i := range 20 {
				_, err := ch.Say(ctx, groupChat, channel.Sender{ID: "u9"}, fmt.Sprintf("old %d", i))
				require.NoError(t, err)
			}
			clk.Advance(5 * time.Minute)
			require.NoError(t, led.MarkIntent(ctx, "t1", 0, chunkFP(r, 0, "the chunk")))
			led.setIntentAt("t1", 0, clk.Now())
			if tc.delivered {
				_, err = ch.Send(ctx, channel.Outgoing{Chat: groupChat, Text: "the chunk"})
				require.NoError(t, err)
			}
			for i := range tc.newer {
				clk.Advance(time.Second)
				_, err := ch.Say(ctx, groupChat, channel.Sender{ID: "u8"}, fmt.Sprintf("newer %d", i))
				require.NoError(t, err)
			}
			before := len(ch.Sent())
			xc := exit.Bind(ch, "t1", r.SessionKey, false)
			res, err := xc.SendSlot(ctx, 0, channel.Outgoing{Chat: groupChat, Text: "the chunk"})
			require.NoError(t, err)
			require.False(t, res.Unknown)
			if tc.delivered {
				require.True(t, res.Skipped)
				require.Len(t, ch.Sent(), before, "never sent twice")
				require.Equal(t, []string{"out-1"}, res.Receipt.MessageIDs)
			} else {
				require.False(t, res.Skipped)
				require.Len(t, ch.Sent(), before+1, "proven absent: sent once")
			}
			require.Equal(t, outbound.SlotSent, led.slotsOf("t1")[0].State)
		})
	}
}

// Without history or an echo to ask, an unsettled chunk is not sent
// again and the result says its fate is unknown.
func TestExitUnknownWithoutHistory(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	exit, err := outbound.NewExit(outbound.ExitConfig{Ledger: led})
	require.NoError(t, err)
	r := reply(ch, "t1", "")
	require.NoError(t, led.MarkIntent(ctx, "t1", 0, chunkFP(r, 0, "x")))
	xc := exit.Bind(ch.Bare(), "t1", r.SessionKey, false)
	_, err = xc.Send(ctx, channel.Outgoing{Chat: groupChat, Text: "x"})
	require.ErrorIs(t, err, outbound.ErrDeliveryUnknown)
	require.Empty(t, ch.Sent())

	// The bot's echoed messages settle it.
	exit, err = outbound.NewExit(outbound.ExitConfig{Ledger: led,
		Echoed: func(_ context.Context, _ string, _ channel.Chat, _ time.Time, text string) ([]string, bool, error) {
			return []string{"echo-7"}, text == "x", nil
		}})
	require.NoError(t, err)
	xc = exit.Bind(ch.Bare(), "t1", r.SessionKey, false)
	rc, err := xc.Send(ctx, channel.Outgoing{Chat: groupChat, Text: "x"})
	require.NoError(t, err)
	require.Equal(t, []string{"echo-7"}, rc.MessageIDs)
	require.Empty(t, ch.Sent())
}

// A card goes through the ledger too.
func TestExitForwardOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ch := &fwdChannel{Channel: chantest.New(chantest.Config{})}
	led := newLedger()
	var rec recordedSends
	exit, err := outbound.NewExit(outbound.ExitConfig{Ledger: led, Delivered: rec.add, Secrets: []string{"s3cr3t-value"}})
	require.NoError(t, err)
	r := reply(ch.Channel, "t1", "")
	xc := exit.Bind(ch, "t1", r.SessionKey, true)
	fs, ok := channel.As[channel.ForwardSender](xc)
	require.True(t, ok)
	_, err = fs.SendForward(ctx, groupChat, []channel.ForwardNode{{Text: "a s3cr3t-value"}, {Text: "b"}})
	require.NoError(t, err)
	require.Equal(t, []string{"a " + outbound.SecretMask, "b"}, rec.texts())
	xc = exit.Bind(ch, "t1", r.SessionKey, false)
	_, err = xc.SendForward(ctx, groupChat, []channel.ForwardNode{{Text: "a"}, {Text: "b"}})
	require.NoError(t, err)
	ch.mu.Lock()
	require.Len(t, ch.cards, 1, "the card went out once")
	ch.mu.Unlock()
}

// richChannel is a channel that renders Markdown itself.
type richChannel struct{ *chantest.Channel }

func (richChannel) RichText() bool { return true }

// A channel's capabilities are seen through the exit bound to it: a
// Markdown channel keeps the reply's Markdown, a plain one gets text.
func TestExitKeepsTheChannelsRichText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rich bool
		want string
	}{{"markdown channel", true, "**bold** move"}, {"plain channel", false, "bold move"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ch := chantest.New(chantest.Config{})
			var target channel.Channel = ch
			if tc.rich {
				target = richChannel{ch}
			}
			exit, err := outbound.NewExit(outbound.ExitConfig{Ledger: newLedger()})
			require.NoError(t, err)
			s := newSender(t, outbound.SenderConfig{Ledger: newLedger(), NoPacing: true})
			r := reply(ch, "t1", "**bold** move")
			r.Channel = exit.Bind(target, r.TurnID, r.SessionKey, true)
			_, err = s.Send(t.Context(), r)
			require.NoError(t, err)
			require.Equal(t, []string{tc.want}, texts(ch.Sent()))
		})
	}
}

// A send whose fate the channel cannot tell (channel.ErrUnconfirmed, a
// relay whose holding process died) keeps the chunk's intent: the next
// attempt does not send it again. Any other error clears it.
func TestExitKeepsTheIntentOfAnUnconfirmedSend(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	exit, err := outbound.NewExit(outbound.ExitConfig{Ledger: led})
	require.NoError(t, err)
	r := reply(ch, "t1", "")

	ch.FailNext(1, fmt.Errorf("relay: holder died: %w", channel.ErrUnconfirmed))
	xc := exit.Bind(ch.Bare(), "t1", r.SessionKey, false)
	_, err = xc.Send(ctx, channel.Outgoing{Chat: groupChat, Text: "x"})
	require.ErrorIs(t, err, channel.ErrUnconfirmed)
	require.Equal(t, channel.ClassTransient, channel.Classify(err))
	xc = exit.Bind(ch.Bare(), "t1", r.SessionKey, false)
	_, err = xc.Send(ctx, channel.Outgoing{Chat: groupChat, Text: "x"})
	require.ErrorIs(t, err, outbound.ErrDeliveryUnknown, "the intent was kept, so the chunk is not sent again")
	require.Empty(t, ch.Sent())

	// A plain failure clears the intent: the chunk goes out next time.
	ch.FailNext(1, channel.ErrOffline)
	xc = exit.Bind(ch.Bare(), "t2", r.SessionKey, false)
	_, err = xc.Send(ctx, channel.Outgoing{Chat: groupChat, Text: "y"})
	require.ErrorIs(t, err, channel.ErrOffline)
	xc = exit.Bind(ch.Bare(), "t2", r.SessionKey, false)
	_, err = xc.Send(ctx, channel.Outgoing{Chat: groupChat, Text: "y"})
	require.NoError(t, err)
	require.Len(t, ch.Sent(), 1)
}
