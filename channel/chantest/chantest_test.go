package chantest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
)

var (
	t0    = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	group = channel.Chat{Kind: channel.Group, ID: "g1"}
	dm    = channel.Chat{Kind: channel.Private, ID: "u1"}
	alice = channel.Sender{ID: "u1", Name: "Alice"}
)

// running starts Run on a new channel and returns it with its sink; Run is
// stopped (and its nil result checked) at cleanup.
func running(t *testing.T, cfg chantest.Config) (*chantest.Channel, *chantest.Recorder) {
	t.Helper()
	c := chantest.New(cfg)
	s := chantest.NewRecorder()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, s) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	// Inject waits for Run, so a harmless notice makes Run observable.
	require.NoError(t, c.Inject(t.Context(), channel.Event{Kind: channel.KindNotice, Chat: group, Notice: &channel.Notice{Type: "startup"}}))
	return c, s
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	c := chantest.New(chantest.Config{})
	require.Equal(t, "chantest", c.Name())
	require.Equal(t, "bot", c.BotID())
	require.Equal(t, channel.TextLimit{}, c.TextLimit())
	require.Equal(t, channel.DefaultTextLimit, channel.LimitOf(c))
	require.True(t, c.Online())
	require.False(t, c.Running())

	lim := channel.TextLimit{Unit: channel.UTF16, Max: 4096}
	c = chantest.New(chantest.Config{Platform: "tg", BotID: "777", Limit: lim})
	require.Equal(t, "tg", c.Name())
	require.Equal(t, "777", c.BotID())
	require.Equal(t, lim, channel.LimitOf(c))
}

func TestRunLifecycle(t *testing.T) {
	t.Parallel()
	c := chantest.New(chantest.Config{Platform: "p", BotID: "b"})
	require.Error(t, c.Run(t.Context(), nil), "nil sink")

	s := chantest.NewRecorder()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, s) }()
	require.NoError(t, c.Inject(t.Context(), channel.Event{Chat: group}), "Inject waits for Run")
	require.True(t, c.Running())
	require.ErrorIs(t, c.Run(t.Context(), s), chantest.ErrRunning)

	cancel()
	require.NoError(t, <-done)
	require.False(t, c.Running())
	states := s.States()
	require.Equal(t, []channel.State{
		{Platform: "p", BotID: "b", Connected: true, Online: true, Reason: "connected"},
		{Platform: "p", BotID: "b", Reason: "stopped"},
	}, states)

	// Run may start again after it returned.
	ctx2, cancel2 := context.WithCancel(t.Context())
	go func() { done <- c.Run(ctx2, s) }()
	require.NoError(t, c.Inject(t.Context(), channel.Event{Chat: group}))
	cancel2()
	require.NoError(t, <-done)
}

func TestInjectWaitsForRunOrContext(t *testing.T) {
	t.Parallel()
	c := chantest.New(chantest.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := c.Inject(ctx, channel.Event{Chat: group})
	require.ErrorIs(t, err, context.Canceled)

	s := chantest.NewRecorder()
	injected := make(chan error, 1)
	go func() { injected <- c.Inject(t.Context(), channel.Event{Chat: group, MessageID: "m1"}) }()
	runCtx, stop := context.WithCancel(t.Context())
	defer stop()
	go func() { _ = c.Run(runCtx, s) }()
	require.NoError(t, <-injected)
	events := s.Received()
	require.Len(t, events, 1)
	require.Equal(t, "m1", events[0].MessageID)
}

func TestInjectFillsDefaults(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	c, s := running(t, chantest.Config{Platform: "p", BotID: "b", Clock: clk})
	ctx := t.Context()
	require.NoError(t, c.Inject(ctx, channel.Event{Chat: group, Sender: alice, Segments: []channel.Segment{channel.Text("a")}}))
	clk.Advance(time.Second)
	require.NoError(t, c.Inject(ctx, channel.Event{Chat: group, Sender: alice}))
	explicit := channel.Event{Platform: "x", BotID: "y", Kind: channel.KindSelf, Chat: dm, MessageID: "own", Time: t0.Add(-time.Hour), Source: channel.SourceBackfill}
	require.NoError(t, c.Inject(ctx, explicit))

	events := s.Received()
	require.Equal(t, channel.KindNotice, events[0].Kind)
	require.Empty(t, events[0].MessageID, "notices get no generated message id")
	events = events[1:]
	require.Len(t, events, 3)
	for i, want := range []struct {
		id string
		at time.Time
	}{{"in-1", t0}, {"in-2", t0.Add(time.Second)}} {
		ev := events[i]
		require.NoError(t, ev.Validate())
		require.Equal(t, "p", ev.Platform)
		require.Equal(t, "b", ev.BotID)
		require.Equal(t, channel.KindMessage, ev.Kind)
		require.Equal(t, channel.SourceLive, ev.Source)
		require.Equal(t, want.id, ev.MessageID)
		require.Equal(t, want.at, ev.Time)
	}
	require.Equal(t, explicit, events[2], "set fields are kept")
}

func TestInjectReturnsSinkError(t *testing.T) {
	t.Parallel()
	c, s := running(t, chantest.Config{})
	nack := errors.New("store down")
	s.SetHandler(func(_ context.Context, ev channel.Event) error {
		if ev.MessageID == "bad" {
			return nack
		}
		return nil
	})
	require.ErrorIs(t, c.Inject(t.Context(), channel.Event{Chat: group, MessageID: "bad"}), nack)
	require.NoError(t, c.Inject(t.Context(), channel.Event{Chat: group, MessageID: "good"}))
	// The platform keeps both, whatever the bot answered.
	page, err := c.FetchHistory(t.Context(), channel.HistoryQuery{Chat: group})
	require.NoError(t, err)
	require.Len(t, page.Events, 2)
}

func TestSayOptions(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	c, _ := running(t, chantest.Config{BotID: "b", Clock: clk})
	tests := []struct {
		name string
		text string
		opts []chantest.SayOption
		want func(ev channel.Event)
	}{
		{"plain", "hi", nil, func(ev channel.Event) {
			require.Equal(t, []channel.Segment{channel.Text("hi")}, ev.Segments)
			require.False(t, ev.ToMe)
		}},
		{"mention bot", "hi", []chantest.SayOption{chantest.MentionBot()}, func(ev channel.Event) {
			require.Equal(t, []channel.Segment{channel.Mention("b"), channel.Text("hi")}, ev.Segments)
			require.True(t, ev.ToMe)
			require.True(t, ev.Mentions("b"))
		}},
		{"quote and mention", "hi", []chantest.SayOption{chantest.MentionUser("u9"), chantest.QuoteOf("m7")}, func(ev channel.Event) {
			require.Equal(t, []channel.Segment{channel.Quote("m7"), channel.Mention("u9"), channel.Text("hi")}, ev.Segments)
			require.Equal(t, "m7", ev.QuoteID())
		}},
		{"ids, time, seq, source", "", []chantest.SayOption{
			chantest.WithMessageID("42"), chantest.WithTime(t0.Add(-time.Minute)), chantest.WithSeq(9),
			chantest.WithSource(channel.SourceGap), chantest.WithSegments(channel.Image(channel.Media{URL: "u"})),
		}, func(ev channel.Event) {
			require.Equal(t, "42", ev.MessageID)
			require.Equal(t, t0.Add(-time.Minute), ev.Time)
			require.Equal(t, int64(9), ev.Seq)
			require.Equal(t, channel.SourceGap, ev.Source)
			require.True(t, ev.MediaOnly())
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := c.Say(t.Context(), group, alice, tc.text, tc.opts...)
			require.NoError(t, err)
			require.NoError(t, ev.Validate())
			require.Equal(t, alice, ev.Sender)
			tc.want(ev)
		})
	}
}

func TestSend(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	c := chantest.New(chantest.Config{Clock: clk})
	ctx := t.Context()

	rc, err := c.Send(ctx, channel.Outgoing{Chat: group, Text: "one", ReplyTo: "m1", Mentions: []string{"u1"}})
	require.NoError(t, err)
	require.Equal(t, channel.Receipt{MessageIDs: []string{"out-1"}, Time: t0}, rc)
	clk.Advance(time.Second)
	rc, err = c.Send(ctx, channel.Outgoing{Chat: dm, Media: []channel.Media{{URL: "x", MIME: "image/png"}}})
	require.NoError(t, err)
	require.Equal(t, []string{"out-2"}, rc.MessageIDs)

	sent := c.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, chantest.Sent{
		Out:     channel.Outgoing{Chat: group, Text: "one", ReplyTo: "m1", Mentions: []string{"u1"}},
		Receipt: channel.Receipt{MessageIDs: []string{"out-1"}, Time: t0},
		At:      t0,
	}, sent[0])
	require.Equal(t, t0.Add(time.Second), sent[1].At)

	// The copy is the caller's.
	sent[0].Out.Mentions[0] = "changed"
	require.Equal(t, "u1", c.Sent()[0].Out.Mentions[0])

	// Sent messages are in the chat history, as the bot's own.
	page, err := c.FetchHistory(ctx, channel.HistoryQuery{Chat: group})
	require.NoError(t, err)
	require.Len(t, page.Events, 1)
	own := page.Events[0]
	require.Equal(t, channel.KindSelf, own.Kind)
	require.Equal(t, "out-1", own.MessageID)
	require.Equal(t, "one", own.Text())
	require.Equal(t, "m1", own.QuoteID())
	require.True(t, own.Mentions("u1"))
	require.NoError(t, own.Validate())
}

// A discarding channel sends and delivers as usual but records nothing.
func TestDiscardKeepsNoRecord(t *testing.T) {
	t.Parallel()
	c := chantest.New(chantest.Config{Discard: true})
	ctx := t.Context()
	rc, err := c.Send(ctx, channel.Outgoing{Chat: group, Text: "one"})
	require.NoError(t, err)
	require.Equal(t, []string{"out-1"}, rc.MessageIDs)
	_, err = c.Send(ctx, channel.Outgoing{Chat: group})
	var rej *channel.RejectedError
	require.ErrorAs(t, err, &rej, "the checks still apply")

	got := make(chan channel.Event, 1)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_ = c.Run(runCtx, channel.SinkFunc(func(_ context.Context, ev channel.Event) error {
			got <- ev
			return nil
		}))
	}()
	require.NoError(t, c.Inject(ctx, channel.Event{Chat: group, Sender: channel.Sender{ID: "u1"},
		Segments: []channel.Segment{channel.Text("hi")}}))
	ev := <-got
	require.Equal(t, "hi", ev.Text())

	require.Empty(t, c.Sent())
	page, err := c.FetchHistory(ctx, channel.HistoryQuery{Chat: group})
	require.NoError(t, err)
	require.Empty(t, page.Events)
}

func TestSendFailures(t *testing.T) {
	t.Parallel()
	limited := chantest.Config{Limit: channel.TextLimit{Unit: channel.Bytes, Max: 5}}
	tests := []struct {
		name  string
		cfg   chantest.Config
		setup func(c *chantest.Channel)
		out   channel.Outgoing
		class channel.ErrorClass
		is    error
		code  string
	}{
		{"offline", chantest.Config{}, func(c *chantest.Channel) { c.SetOnline(t.Context(), false) },
			channel.Outgoing{Chat: group, Text: "x"}, channel.ClassOffline, channel.ErrOffline, ""},
		{"fail next default", chantest.Config{}, func(c *chantest.Channel) { c.FailNext(1, nil) },
			channel.Outgoing{Chat: group, Text: "x"}, channel.ClassTransient, chantest.ErrSendFailed, ""},
		{"fail next rate limited", chantest.Config{}, func(c *chantest.Channel) { c.FailNext(1, &channel.RateLimitedError{RetryAfter: time.Second}) },
			channel.Outgoing{Chat: group, Text: "x"}, channel.ClassRateLimited, channel.ErrRateLimited, ""},
		{"bad chat", chantest.Config{}, nil,
			channel.Outgoing{Chat: channel.Chat{Kind: "room", ID: "1"}, Text: "x"}, channel.ClassRejected, channel.ErrRejected, "bad_chat"},
		{"empty", chantest.Config{}, nil,
			channel.Outgoing{Chat: group}, channel.ClassRejected, channel.ErrRejected, "empty_message"},
		{"too long in bytes", limited, nil,
			channel.Outgoing{Chat: group, Text: "你好"}, channel.ClassRejected, channel.ErrRejected, "text_too_long"},
		{"cancelled", chantest.Config{}, nil,
			channel.Outgoing{Chat: group, Text: "x"}, channel.ClassTransient, context.Canceled, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := chantest.New(tc.cfg)
			if tc.setup != nil {
				tc.setup(c)
			}
			ctx := t.Context()
			if errors.Is(tc.is, context.Canceled) {
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				ctx = cctx
			}
			_, err := c.Send(ctx, tc.out)
			require.ErrorIs(t, err, tc.is)
			require.Equal(t, tc.class, channel.Classify(err))
			if tc.code != "" {
				var rej *channel.RejectedError
				require.ErrorAs(t, err, &rej)
				require.Equal(t, tc.code, rej.Code)
			}
			require.Empty(t, c.Sent())
		})
	}

	t.Run("fail next n then succeed", func(t *testing.T) {
		t.Parallel()
		c := chantest.New(chantest.Config{})
		boom := errors.New("boom")
		c.FailNext(2, boom)
		for range 2 {
			_, err := c.Send(t.Context(), channel.Outgoing{Chat: group, Text: "x"})
			require.ErrorIs(t, err, boom)
		}
		rc, err := c.Send(t.Context(), channel.Outgoing{Chat: group, Text: "x"})
		require.NoError(t, err)
		require.Equal(t, []string{"out-1"}, rc.MessageIDs, "failed sends use no id")
	})

	t.Run("offline does not consume fail next", func(t *testing.T) {
		t.Parallel()
		c := chantest.New(chantest.Config{})
		c.FailNext(1, nil)
		c.SetOnline(t.Context(), false)
		_, err := c.Send(t.Context(), channel.Outgoing{Chat: group, Text: "x"})
		require.ErrorIs(t, err, channel.ErrOffline)
		c.SetOnline(t.Context(), true)
		_, err = c.Send(t.Context(), channel.Outgoing{Chat: group, Text: "x"})
		require.ErrorIs(t, err, chantest.ErrSendFailed)
	})
}

func TestTextLen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s                    string
		runes, bytes, utf16s int
	}{
		{"", 0, 0, 0},
		{"abc", 3, 3, 3},
		{"你好", 2, 6, 2},
		{"😀", 1, 4, 2},
		{"a👨‍👩‍👧", 6, 19, 9},
	}
	for _, tc := range tests {
		require.Equal(t, tc.runes, chantest.TextLen(tc.s, channel.Runes), "%q runes", tc.s)
		require.Equal(t, tc.bytes, chantest.TextLen(tc.s, channel.Bytes), "%q bytes", tc.s)
		require.Equal(t, tc.utf16s, chantest.TextLen(tc.s, channel.UTF16), "%q utf16", tc.s)
	}
}

func TestWaitSent(t *testing.T) {
	t.Parallel()
	c := chantest.New(chantest.Config{})
	got := make(chan []chantest.Sent, 1)
	go func() {
		s, err := c.WaitSent(t.Context(), 3)
		if err == nil {
			got <- s
		}
		close(got)
	}()
	for i := range 3 {
		_, err := c.Send(t.Context(), channel.Outgoing{Chat: group, Text: fmt.Sprint(i)})
		require.NoError(t, err)
	}
	s := <-got
	require.Len(t, s, 3)
	require.Equal(t, "0", s[0].Out.Text)

	// Already satisfied: returns at once.
	s, err := c.WaitSent(t.Context(), 2)
	require.NoError(t, err)
	require.Len(t, s, 3)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s, err = c.WaitSent(ctx, 4)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, s, 3, "what was sent so far")
}

func TestSetOnlineReportsState(t *testing.T) {
	t.Parallel()
	c, s := running(t, chantest.Config{Platform: "p", BotID: "b"})
	c.SetOnline(t.Context(), false)
	require.False(t, c.Online())
	c.SetOnline(t.Context(), true)
	states := s.States()
	require.Equal(t, []channel.State{
		{Platform: "p", BotID: "b", Connected: true, Online: true, Reason: "connected"},
		{Platform: "p", BotID: "b", Connected: true, Reason: "account offline"},
		{Platform: "p", BotID: "b", Connected: true, Online: true, Reason: "account online"},
	}, states)
}

func TestCapabilitiesOffline(t *testing.T) {
	t.Parallel()
	c := chantest.New(chantest.Config{})
	c.SetMember(group, channel.Member{UserID: "u1"})
	c.SetOnline(t.Context(), false)
	ctx := t.Context()
	calls := map[string]error{
		"Typing": c.Typing(ctx, group),
		"Recall": c.Recall(ctx, group, "m"),
	}
	_, calls["LookupMember"] = c.LookupMember(ctx, group, "u1")
	_, calls["ListChats"] = c.ListChats(ctx)
	_, calls["FetchHistory"] = c.FetchHistory(ctx, channel.HistoryQuery{Chat: group})
	for name, err := range calls {
		require.ErrorIs(t, err, channel.ErrOffline, name)
	}
}

func TestTyping(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	c := chantest.New(chantest.Config{Clock: clk})
	require.NoError(t, c.Typing(t.Context(), dm))
	clk.Advance(5 * time.Second)
	require.NoError(t, c.Typing(t.Context(), dm))
	require.Equal(t, []chantest.Typing{{Chat: dm, At: t0}, {Chat: dm, At: t0.Add(5 * time.Second)}}, c.Typings())
}

func TestMembers(t *testing.T) {
	t.Parallel()
	c := chantest.New(chantest.Config{})
	m := channel.Member{UserID: "u1", Name: "Alice", Role: channel.RoleAdmin, Level: 12, LevelKnown: true}
	c.SetMember(group, m)
	got, err := c.LookupMember(t.Context(), group, "u1")
	require.NoError(t, err)
	require.Equal(t, m, got)
	_, err = c.LookupMember(t.Context(), group, "u2")
	require.ErrorIs(t, err, chantest.ErrNoMember)
	_, err = c.LookupMember(t.Context(), channel.Chat{Kind: channel.Group, ID: "other"}, "u1")
	require.ErrorIs(t, err, chantest.ErrNoMember)
}

func TestHistoryPagingAndChats(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	c, _ := running(t, chantest.Config{Clock: clk})
	ctx := t.Context()
	// 5 injected messages (one arriving late with an older time), 2 sends,
	// a redelivery that must not duplicate, and a message in another chat.
	for i := range 4 {
		_, err := c.Say(ctx, group, alice, fmt.Sprint("m", i), chantest.WithMessageID(fmt.Sprint("m", i)))
		require.NoError(t, err)
		clk.Advance(time.Second)
	}
	_, err := c.Say(ctx, group, alice, "late", chantest.WithMessageID("late"), chantest.WithTime(t0.Add(1500*time.Millisecond)))
	require.NoError(t, err)
	_, err = c.Say(ctx, group, alice, "m1", chantest.WithMessageID("m1"), chantest.WithTime(t0.Add(time.Second)))
	require.NoError(t, err, "redelivery")
	_, err = c.Send(ctx, channel.Outgoing{Chat: group, Text: "r1"})
	require.NoError(t, err)
	_, err = c.Send(ctx, channel.Outgoing{Chat: group, Text: "r2"})
	require.NoError(t, err, "same time as r1: arrival order breaks the tie")
	_, err = c.Say(ctx, dm, alice, "private")
	require.NoError(t, err)

	want := []string{"out-2", "out-1", "m3", "m2", "late", "m1", "m0"}
	tests := []struct {
		limit int
		pages [][]string
	}{
		{0, [][]string{want}},
		{3, [][]string{want[:3], want[3:6], want[6:]}},
		{7, [][]string{want}},
		{2, [][]string{want[:2], want[2:4], want[4:6], want[6:]}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint("limit ", tc.limit), func(t *testing.T) {
			cursor := ""
			for i, wantPage := range tc.pages {
				page, err := c.FetchHistory(ctx, channel.HistoryQuery{Chat: group, Cursor: cursor, Limit: tc.limit})
				require.NoError(t, err)
				var ids []string
				for _, ev := range page.Events {
					require.Equal(t, channel.SourceBackfill, ev.Source)
					ids = append(ids, ev.MessageID)
				}
				require.Equal(t, wantPage, ids, "page %d", i)
				if i == len(tc.pages)-1 {
					require.Empty(t, page.Next, "last page")
				} else {
					require.NotEmpty(t, page.Next)
				}
				cursor = page.Next
			}
		})
	}

	t.Run("new messages do not shift later pages", func(t *testing.T) {
		page, err := c.FetchHistory(ctx, channel.HistoryQuery{Chat: group, Limit: 3})
		require.NoError(t, err)
		_, err = c.Send(ctx, channel.Outgoing{Chat: group, Text: "newer"})
		require.NoError(t, err)
		page, err = c.FetchHistory(ctx, channel.HistoryQuery{Chat: group, Cursor: page.Next, Limit: 3})
		require.NoError(t, err)
		require.Equal(t, "m2", page.Events[0].MessageID)
	})

	t.Run("bad cursor", func(t *testing.T) {
		_, err := c.FetchHistory(ctx, channel.HistoryQuery{Chat: group, Cursor: "nope"})
		require.ErrorIs(t, err, channel.ErrRejected)
	})

	t.Run("unknown chat", func(t *testing.T) {
		page, err := c.FetchHistory(ctx, channel.HistoryQuery{Chat: channel.Chat{Kind: channel.Group, ID: "none"}})
		require.NoError(t, err)
		require.Empty(t, page.Events)
		require.Empty(t, page.Next)
	})

	chats, err := c.ListChats(ctx)
	require.NoError(t, err)
	require.Equal(t, []channel.Chat{group, dm}, chats)
}

func TestRecall(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	c := chantest.New(chantest.Config{Clock: clk})
	ctx := t.Context()
	rc, err := c.Send(ctx, channel.Outgoing{Chat: group, Text: "oops"})
	require.NoError(t, err)
	_, err = c.Send(ctx, channel.Outgoing{Chat: group, Text: "keep"})
	require.NoError(t, err)

	require.NoError(t, c.Recall(ctx, group, rc.MessageIDs[0]))
	require.Equal(t, []chantest.Recall{{Chat: group, MessageID: "out-1", At: t0}}, c.Recalls())
	page, err := c.FetchHistory(ctx, channel.HistoryQuery{Chat: group})
	require.NoError(t, err)
	require.Len(t, page.Events, 1)
	require.Equal(t, "keep", page.Events[0].Text())

	err = c.Recall(ctx, group, "out-1")
	require.ErrorIs(t, err, channel.ErrRejected, "already recalled")
	require.Len(t, c.Sent(), 2, "Sent keeps what was sent")
}

// TestRecalledMessageCanReturn: a recalled message leaves the history, and
// the same id delivered again is remembered again (once).
func TestRecalledMessageCanReturn(t *testing.T) {
	t.Parallel()
	c, _ := running(t, chantest.Config{Clock: clock.NewFake(t0)})
	ctx := t.Context()
	texts := func() []string {
		page, err := c.FetchHistory(ctx, channel.HistoryQuery{Chat: group})
		require.NoError(t, err)
		var out []string
		for _, ev := range page.Events {
			out = append(out, ev.Text())
		}
		return out
	}
	_, err := c.Say(ctx, group, alice, "first", chantest.WithMessageID("m"))
	require.NoError(t, err)
	require.NoError(t, c.Recall(ctx, group, "m"))
	require.Empty(t, texts())
	for range 2 {
		_, err = c.Say(ctx, group, alice, "again", chantest.WithMessageID("m"))
		require.NoError(t, err)
	}
	require.Equal(t, []string{"again"}, texts())
}

func TestBareHidesCapabilities(t *testing.T) {
	t.Parallel()
	c := chantest.New(chantest.Config{Platform: "p", Limit: channel.TextLimit{Max: 10}})
	b := c.Bare()
	require.Equal(t, "p", b.Name())
	for name, ok := range map[string]bool{
		"Typer":          is[channel.Typer](b),
		"HistoryFetcher": is[channel.HistoryFetcher](b),
		"ChatLister":     is[channel.ChatLister](b),
		"Recaller":       is[channel.Recaller](b),
		"MemberLookup":   is[channel.MemberLookup](b),
		"TextLimiter":    is[channel.TextLimiter](b),
	} {
		require.False(t, ok, name)
	}
	_, err := b.Send(t.Context(), channel.Outgoing{Chat: group, Text: "x"})
	require.NoError(t, err)
	require.Len(t, c.Sent(), 1)
}

func is[T any](v any) bool {
	_, ok := v.(T)
	return ok
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	c, s := running(t, chantest.Config{})
	g, ctx := errgroup.WithContext(t.Context())
	const n = 20
	for i := range n {
		g.Go(func() error {
			if _, err := c.Say(ctx, group, alice, fmt.Sprint("in ", i)); err != nil {
				return err
			}
			if _, err := c.Send(ctx, channel.Outgoing{Chat: group, Text: fmt.Sprint("out ", i)}); err != nil {
				return err
			}
			if err := c.Typing(ctx, group); err != nil {
				return err
			}
			_, err := c.FetchHistory(ctx, channel.HistoryQuery{Chat: group, Limit: 5})
			return err
		})
	}
	g.Go(func() error {
		_, err := c.WaitSent(ctx, n)
		return err
	})
	require.NoError(t, g.Wait())

	ids := map[string]bool{}
	for _, s := range c.Sent() {
		ids[s.Receipt.MessageIDs[0]] = true
	}
	require.Len(t, ids, n, "unique receipt ids")
	events := s.Received()
	in := map[string]bool{}
	for _, ev := range events {
		if strings.HasPrefix(ev.MessageID, "in-") {
			in[ev.MessageID] = true
		}
	}
	require.Len(t, in, n, "unique injected ids")
	require.Len(t, c.Typings(), n)
}
