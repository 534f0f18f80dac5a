package persona_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/internal/logbuf"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store"
)

// backfillWait bounds every wait for an asynchronous effect in the
// disconnect test; it is a deadline, never a timing assertion.
const backfillWait = 10 * time.Second

// obRig is a persona.Pipeline running the OneBot adapter (reverse
// WebSocket) against the onebottest fake, all on one fake clock.
type obRig struct {
	t     *testing.T
	clk   *clock.Fake
	fake  *onebottest.Server
	db    *store.DB
	p     *persona.Pipeline
	model *agenttest.Model
	logs  *logbuf.Buffer
	group channel.Chat
	users int64 // senders used so far
}

func newOneBotRig(t *testing.T) *obRig {
	t.Helper()
	r := &obRig{
		t:     t,
		clk:   clock.NewFake(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)),
		logs:  &logbuf.Buffer{},
		group: channel.Chat{Kind: channel.Group, ID: "100200300"},
	}
	adapterLogs := &logbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pipeline log:\n%s", r.logs.String())
			t.Logf("adapter log:\n%s", adapterLogs.String())
		}
	})

	// The fake stamps messages with the shared fake clock; its reverse
	// WebSocket client redials on the wall clock, quickly.
	r.fake = onebottest.New(onebottest.Config{AccessToken: "tok", Clock: r.clk, ReconnectInterval: 10 * time.Millisecond})
	t.Cleanup(r.fake.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	ch, err := onebot.New(onebot.Config{
		Mode: onebot.ModeReverseWS, Listener: ln, AccessToken: "tok", Clock: r.clk,
		Logger: slog.New(slog.NewJSONHandler(adapterLogs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, err)

	db, err := store.Open(t.TempDir()+"/persona.db", store.Options{Clock: r.clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	r.db = db

	// Every generation answers with a distinct short line.
	var n atomic.Int64
	r.model = agenttest.New().Otherwise(agenttest.Func(func(context.Context, agent.Request) (*agent.Response, error) {
		return &agent.Response{Text: fmt.Sprintf("reply %d", n.Add(1)), FinishReason: "stop"}, nil
	}))
	p, err := persona.New(persona.Options{
		Channels: []channel.Channel{ch},
		DB:       db,
		DataDir:  t.TempDir(),
		Persona:  "You are Mira.",
		Model:    r.model,
		Reviewer: outbound.BasicReviewer,
		Clock:    r.clk,
		NoPacing: true,
		Logger:   slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, err)
	r.p = p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(backfillWait):
			t.Error("Run did not return after cancel")
		}
		require.NoError(t, p.Close())
	})
	r.fake.DialReverse(t.Context(), "ws://"+ln.Addr().String()+"/onebot/v11/ws")
	return r
}

// eventually polls cond until it holds.
func (r *obRig) eventually(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(backfillWait)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitLog waits until the pipeline logged msg at least n times and returns
// those records.
func (r *obRig) waitLog(msg string, n int) []map[string]any {
	r.t.Helper()
	var recs []map[string]any
	r.eventually(fmt.Sprintf("%d log lines %q", n, msg), func() bool {
		var err error
		recs, err = r.logs.Records(msg)
		return err == nil && len(recs) >= n
	})
	return recs
}

// emit posts a group message on the fake platform: an @-mention of the bot
// when at, else plain chatter. Every message has its own sender, so no two
// are a same-person burst (a newer direct message from the same sender
// while the older reply is generating).
func (r *obRig) emit(at bool, text string, opts ...func(*onebottest.Incoming)) onebottest.Record {
	r.t.Helper()
	r.users++
	in := onebottest.Incoming{GroupID: 100200300, UserID: 5000 + r.users, Nickname: fmt.Sprintf("user%d", r.users)}
	if at {
		in.Message = append(in.Message, onebot.Segment{Type: "at", Data: map[string]string{"qq": r.fake.BotID()}})
	}
	in.Message = append(in.Message, onebot.TextSegment(text))
	for _, o := range opts {
		o(&in)
	}
	rec, err := r.fake.EmitMessage(r.t.Context(), in)
	require.NoError(r.t, err)
	return rec
}

// key is the queue item id of a fake message.
func (r *obRig) key(rec onebottest.Record) string {
	ev := channel.Event{Platform: onebot.DefaultPlatform, BotID: r.fake.BotID(), Chat: r.group,
		MessageID: strconv.FormatInt(int64(rec.ID), 10)}
	return ev.Key()
}

// lookup returns the record of a fake message, ok=false if there is none.
func (r *obRig) lookup(rec onebottest.Record) (inbound.Record, bool) {
	r.t.Helper()
	got, err := r.db.Lookup(r.t.Context(), r.key(rec))
	if errors.Is(err, inbound.ErrNotFound) {
		return inbound.Record{}, false
	}
	require.NoError(r.t, err)
	return got, true
}

// waitDone waits until every message has a terminal record.
func (r *obRig) waitDone(recs ...onebottest.Record) {
	r.t.Helper()
	for _, rec := range recs {
		r.eventually("the record of message "+strconv.Itoa(int(rec.ID)), func() bool {
			got, ok := r.lookup(rec)
			return ok && got.Status == inbound.StatusDone
		})
	}
}

// requireOutcome checks a message's record: its outcome, source and
// history-only flag, and that it was claimed exactly once.
func (r *obRig) requireOutcome(rec onebottest.Record, code outcome.Code, src channel.Source) {
	r.t.Helper()
	got, ok := r.lookup(rec)
	require.True(r.t, ok, "no record for message %d (%s)", rec.ID, rec.Message.PlainText())
	msg := fmt.Sprintf("message %d (%q)", rec.ID, rec.Message.PlainText())
	require.Equal(r.t, inbound.StatusDone, got.Status, msg)
	require.Equal(r.t, code, got.Outcome.Code, msg)
	require.Equal(r.t, src, got.Source, msg)
	require.Equal(r.t, code == inbound.BackfillHistoryOnly, got.HistoryOnly, msg)
	require.Equal(r.t, 1, got.Attempts, msg)
}

// replies counts the bot's sends per quoted message id.
func (r *obRig) replies() map[string]int {
	out := map[string]int{}
	for _, s := range r.fake.Sent() {
		for _, seg := range s.Message {
			if seg.Type == "reply" {
				out[seg.Data["id"]]++
			}
		}
	}
	return out
}

// generations counts the model calls that generated a reply.
func (r *obRig) generations() int {
	n := 0
	for _, req := range r.model.Requests() {
		if req.Purpose == agent.PurposeChat {
			n++
		}
	}
	return n
}

// waitSent waits until the fake received n sends from the bot.
func (r *obRig) waitSent(n int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), backfillWait)
	defer cancel()
	_, err := r.fake.WaitSent(ctx, n)
	require.NoError(r.t, err)
}

// runBackfill moves the clock to at and waits for the n-th completed
// backfill run, which it returns.
func (r *obRig) runBackfill(at time.Time, n int) map[string]any {
	r.t.Helper()
	r.clk.Set(at)
	recs := r.waitLog("backfill_completed", n)
	return recs[n-1]
}

// num reads a numeric log attribute, which must be present.
func num(rec map[string]any, key string) int {
	f, ok := rec[key].(float64)
	if !ok {
		panic(fmt.Sprintf("log attribute %q missing in %v", key, rec))
	}
	return int(f)
}

func logTime(t *testing.T, rec map[string]any, key string) time.Time {
	t.Helper()
	s, ok := rec[key].(string)
	require.True(t, ok, "log attribute %q missing in %v", key, rec)
	at, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return at
}

func msgID(rec onebottest.Record) string { return strconv.FormatInt(int64(rec.ID), 10) }

// TestDisconnectBackfillAndSeqGap is issue 6's disconnect test, end to end:
// a real Pipeline with the OneBot adapter (reverse WebSocket) against the
// onebottest fake, every coordinator timer driven by a fake clock.
//
//  1. Online, the bot answers a live @-message.
//  2. The implementation goes down. While the bot is away the group gets
//     five @-mentions of the bot, plain chatter and one @-mention older
//     than the replay cutoff; nothing is pushed. The implementation comes
//     back and the adapter reconnects. The first live message after it is
//     answered and its seq jump schedules a gap check, which waits for the
//     +1 s backfill. That backfill pulls the history: exactly the newest 3
//     @-mentions are answered, the rest complete backfill_history_only, the
//     old one ignored_stale, and the gap is settled by what it read. The
//     +1 min and +5 min runs find everything known: nothing is processed
//     twice.
//  3. Online again, the pushes of two group messages are lost; the next
//     live message's seq jumps. The gap is detected, its first refetch
//     fails, the 15 s recheck finds both messages (Source gap, under the
//     backfill rules) and logs backfill_gap_resolved.
func TestDisconnectBackfillAndSeqGap(t *testing.T) {
	t.Parallel()
	r := newOneBotRig(t)
	opened := r.waitLog("connection_opened", 1)[0]
	connectedAt := r.clk.Now()
	require.Equal(t, connectedAt.Add(-inbound.DefaultReplayPadding), logTime(t, opened, "cutoff"),
		"first connection: cutoff from the start time (no checkpoint, empty store)")

	// 1. Online: a live @-message is answered.
	live := r.emit(true, " are you there?")
	r.waitDone(live)
	r.requireOutcome(live, outcome.Replied, channel.SourceLive)
	r.waitSent(1)

	// The three reconnect backfills of the first connection find only
	// what was delivered live.
	for i, d := range inbound.DefaultBackfillDelays() {
		run := r.runBackfill(connectedAt.Add(d), i+1)
		require.Zero(t, num(run, "enqueued"), "run %d of the first connection", i+1)
	}

	// 2. The implementation goes down.
	r.fake.SetDown(true)
	down := r.waitLog("disconnected", 1)[0]
	lastOnline := logTime(t, down, "last_online")
	cutoff := lastOnline.Add(-inbound.DefaultReplayPadding)

	// While the bot is away the group keeps talking (stored, not pushed).
	away := func(at bool, text string, opts ...func(*onebottest.Incoming)) onebottest.Record {
		r.clk.Advance(7 * time.Minute)
		return r.emit(at, text, opts...)
	}
	m1 := away(true, " first question")
	c1 := away(false, "chatter one")
	m2 := away(true, " second question")
	stale := away(true, " a message from long ago", func(in *onebottest.Incoming) {
		in.Time = cutoff.Add(-10 * time.Minute) // its platform time is before the cutoff
	})
	m3 := away(true, " third question")
	c2 := away(false, "chatter two")
	m4 := away(true, " fourth question")
	m5 := away(true, " fifth question")
	c3 := away(false, "chatter three")
	awayMsgs := []onebottest.Record{m1, c1, m2, stale, m3, c2, m4, m5, c3}
	r.clk.Advance(30 * time.Minute)

	// It comes back; the fake redials and the adapter reconnects.
	r.fake.SetDown(false)
	back := r.waitLog("reconnected", 1)[0]
	reconnectAt := r.clk.Now()
	require.Equal(t, cutoff, logTime(t, back, "cutoff"), "cutoff = disconnected_at − 30 min")
	require.Equal(t, lastOnline, logTime(t, back, "disconnected_at"))
	for _, m := range awayMsgs {
		_, ok := r.lookup(m)
		require.False(t, ok, "message %d was never pushed", m.ID)
	}

	// The first live message after the reconnect is answered at once; its
	// seq jumps over the outage, so a gap check is scheduled, but it waits
	// for the +1 s backfill.
	after := r.emit(true, " back online?")
	r.waitDone(after)
	r.requireOutcome(after, outcome.Replied, channel.SourceLive)
	r.waitSent(2)
	outage := r.waitLog("backfill_gap_detected", 1)[0]
	require.Equal(t, int(m1.Seq), num(outage, "from"), "the gap starts after the last seq seen before the outage")
	require.Equal(t, int(c3.Seq), num(outage, "to"))
	require.Empty(t, r.logs.MustRecords(r.t, "backfill_gap_resolved"), "the gap check waits for the first backfill")

	// The +1 s backfill pulls the history.
	run := r.runBackfill(reconnectAt.Add(time.Second), 4)
	require.Equal(t, 1, num(run, "run"))
	require.Equal(t, len(awayMsgs), num(run, "enqueued"), "run 1: %v", run)
	require.Equal(t, 3, num(run, "triggered"), "run 1: %v", run)
	require.Equal(t, 5, num(run, "history_only"), "run 1: %v", run)
	require.Equal(t, 1, num(run, "stale"), "run 1: %v", run)
	require.Equal(t, 2, num(run, "known"), "run 1: the live messages are known: %v", run)
	r.waitDone(awayMsgs...)
	r.waitSent(5)
	// The outage's gap is settled by what the backfill read.
	settled := r.waitLog("backfill_gap_resolved", 1)[0]
	require.Equal(t, int(m1.Seq), num(settled, "from"))
	require.Equal(t, int(c3.Seq), num(settled, "to"))
	require.Equal(t, 1, num(settled, "checks"))

	for _, m := range []onebottest.Record{m3, m4, m5} {
		r.requireOutcome(m, outcome.Replied, channel.SourceBackfill)
	}
	for _, m := range []onebottest.Record{m1, m2, c1, c2, c3} {
		r.requireOutcome(m, inbound.BackfillHistoryOnly, channel.SourceBackfill)
	}
	r.requireOutcome(stale, inbound.IgnoredStale, channel.SourceBackfill)

	// The +1 min and +5 min runs read the same history again: everything
	// is known, nothing is queued twice.
	for i, d := range inbound.DefaultBackfillDelays()[1:] {
		run := r.runBackfill(reconnectAt.Add(d), 5+i)
		require.Zero(t, num(run, "enqueued"), "run %d after the reconnect: %v", i+2, run)
		require.Equal(t, len(awayMsgs)+2, num(run, "known"), "run %d after the reconnect: %v", i+2, run)
	}
	require.Equal(t, map[string]int{msgID(live): 1, msgID(after): 1, msgID(m3): 1, msgID(m4): 1, msgID(m5): 1}, r.replies(),
		"each triggering message answered exactly once, with a quote")
	require.Len(t, r.fake.Sent(), 5)
	require.Equal(t, 5, r.generations())

	// 3. Online: the pushes of two messages are lost, then a live message's
	// seq jumps. The first refetch of the gap fails; the recheck finds them.
	r.fake.FailNext("get_group_msg_history", onebottest.RetcodeFailed)
	r.fake.SetLosePushes(true)
	lost1 := r.emit(true, " did you see this?")
	lost2 := r.emit(false, "chatter that was lost")
	r.fake.SetLosePushes(false)
	jump := r.emit(true, " hello again")
	require.Equal(t, lost2.Seq+1, jump.Seq)

	detected := r.waitLog("backfill_gap_detected", 2)
	require.Len(t, detected, 2)
	require.Equal(t, int(lost1.Seq), num(detected[1], "from"))
	require.Equal(t, int(lost2.Seq), num(detected[1], "to"))
	r.waitLog("backfill_gap_fetch_failed", 1)
	recheck := r.waitLog("backfill_gap_recheck_scheduled", 1)[0]
	require.Equal(t, r.clk.Now().Add(inbound.DefaultGapRechecks()[0]), logTime(t, recheck, "due"))
	r.waitDone(jump)
	r.requireOutcome(jump, outcome.Replied, channel.SourceLive)
	r.waitSent(6)
	for _, m := range []onebottest.Record{lost1, lost2} {
		_, ok := r.lookup(m)
		require.False(t, ok, "message %d is not known before the recheck", m.ID)
	}
	require.Len(t, r.logs.MustRecords(r.t, "backfill_gap_resolved"), 1)

	r.clk.Advance(inbound.DefaultGapRechecks()[0])
	resolved := r.waitLog("backfill_gap_resolved", 2)[1]
	require.Equal(t, int(lost1.Seq), num(resolved, "from"))
	require.Equal(t, int(lost2.Seq), num(resolved, "to"))
	require.Equal(t, 2, num(resolved, "checks"), "found by the first recheck")
	r.waitDone(lost1, lost2)
	r.requireOutcome(lost1, outcome.Replied, channel.SourceGap)
	r.requireOutcome(lost2, inbound.BackfillHistoryOnly, channel.SourceGap)
	r.waitSent(7)
	require.Empty(t, r.logs.MustRecords(r.t, "backfill_gap_unresolved"))

	// One record per message, each answer sent once.
	recs, err := r.db.Records(t.Context(), store.RecordQuery{})
	require.NoError(t, err)
	require.Len(t, recs, 2+len(awayMsgs)+3)
	ids := map[string]bool{}
	for _, rec := range recs {
		require.False(t, ids[rec.ID], "duplicate record %s", rec.ID)
		ids[rec.ID] = true
		require.Equal(t, inbound.StatusDone, rec.Status, rec.ID)
		require.Equal(t, 1, rec.Attempts, rec.ID)
	}
	counts, err := r.db.CountOutcomes(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[outcome.Code]int{
		outcome.Replied:             7,
		inbound.BackfillHistoryOnly: 6,
		inbound.IgnoredStale:        1,
	}, counts)
	require.Equal(t, map[string]int{
		msgID(live): 1, msgID(after): 1, msgID(m3): 1, msgID(m4): 1, msgID(m5): 1, msgID(jump): 1, msgID(lost1): 1,
	}, r.replies())
	require.Len(t, r.fake.Sent(), 7)
	require.Equal(t, 7, r.generations())
}
