package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/cluster"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/store/postgres"
)

// The tests run several "processes" in one: each has its own
// *postgres.DB on one schema, its own test channel and its own Share.
// The channels all talk to one fake platform that accepts a single
// connection at a time and records every delivery (and what other people
// say), which the channels read back as the chats' history.

const (
	// waitFor bounds every wait on something that happens in the
	// background (a takeover, a relayed send).
	waitFor = 10 * time.Second
	tick    = 20 * time.Millisecond
)

// platform is the fake platform.
type platform struct {
	mu        sync.Mutex
	running   int    // channels connected now
	overlap   bool   // two were connected at once
	current   string // the connected channel's id
	runs      []string
	delivered []delivery
	flaky     map[string]bool // texts whose first send failed
	actions   []string        // what the capabilities did, as "channel id: what"
	closed    int             // media bodies closed
}

// delivery is one message in a chat: the bot's (sent through the channel
// by), or someone else's (from).
type delivery struct {
	by   string
	from string
	out  channel.Outgoing
	id   string
	at   time.Time
}

// appendLocked records a message and returns its id and time.
func (p *platform) appendLocked(d delivery) delivery {
	d.id = fmt.Sprintf("m%d", len(p.delivered)+1)
	d.at = time.UnixMilli(1_700_000_000_000 + int64(len(p.delivered)+1)).UTC()
	p.delivered = append(p.delivered, d)
	return d
}

// say records that user wrote text in chat.
func (p *platform) say(chat channel.Chat, user, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.appendLocked(delivery{from: user, out: channel.Outgoing{Chat: chat, Text: text}})
}

// event is the message as the chat's history shows it.
func (d delivery) event(botID string) channel.Event {
	ev := channel.Event{Platform: "test", BotID: botID, Kind: channel.KindSelf, Chat: d.out.Chat, MessageID: d.id,
		Time: d.at, Sender: channel.Sender{ID: botID, Name: "Bot", IsBot: true},
		Raw: json.RawMessage(`{"message_id":"` + d.id + `"}`)}
	if d.from != "" {
		ev.Kind, ev.Sender = channel.KindMessage, channel.Sender{ID: d.from, Name: "User " + d.from, Role: channel.RoleMember}
	}
	if d.out.ReplyTo != "" {
		ev.Segments = append(ev.Segments, channel.Quote(d.out.ReplyTo))
		ev.Quoted = &channel.Quoted{MessageID: d.out.ReplyTo, Sender: channel.Sender{ID: "u1"}, Text: "quoted"}
	}
	for _, m := range d.out.Mentions {
		ev.Segments = append(ev.Segments, channel.Mention(m))
	}
	if d.out.Text != "" {
		ev.Segments = append(ev.Segments, channel.Text(d.out.Text))
	}
	for _, m := range d.out.Media {
		ev.Segments = append(ev.Segments, channel.Image(m))
	}
	return ev
}

func newPlatform() *platform { return &platform{flaky: map[string]bool{}} }

// holder returns the id of the connected channel ("" for none).
func (p *platform) holder() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.current
}

func (p *platform) overlapped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.overlap
}

// deliveries returns the deliveries of text.
func (p *platform) deliveries(text string) []delivery {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []delivery
	for _, d := range p.delivered {
		if d.out.Text == text {
			out = append(out, d)
		}
	}
	return out
}

// testChannel is one process's adapter for the fake platform.
type testChannel struct {
	id string
	pl *platform

	mu    sync.Mutex
	sink  channel.Sink
	botID string
}

func newTestChannel(id string, pl *platform) *testChannel {
	return &testChannel{id: id, pl: pl, botID: "bot-1"}
}

func (c *testChannel) Name() string { return "test" }

func (c *testChannel) TextLimit() channel.TextLimit {
	return channel.TextLimit{Unit: channel.Runes, Max: 321}
}

func (c *testChannel) Run(ctx context.Context, sink channel.Sink) error {
	c.pl.mu.Lock()
	c.pl.running++
	if c.pl.running > 1 {
		c.pl.overlap = true
	}
	c.pl.current = c.id
	c.pl.runs = append(c.pl.runs, c.id)
	c.pl.mu.Unlock()
	defer func() {
		c.pl.mu.Lock()
		c.pl.running--
		if c.pl.current == c.id {
			c.pl.current = ""
		}
		c.pl.mu.Unlock()
	}()
	c.mu.Lock()
	c.sink = sink
	c.mu.Unlock()
	c.report(ctx, true, "connected")
	<-ctx.Done()
	c.report(context.WithoutCancel(ctx), false, "stopped")
	c.mu.Lock()
	c.sink = nil
	c.mu.Unlock()
	return nil
}

// report tells the running channel's sink a state.
func (c *testChannel) report(ctx context.Context, online bool, reason string) {
	c.mu.Lock()
	sink, bot := c.sink, c.botID
	c.mu.Unlock()
	if sink != nil {
		sink.ReportState(ctx, channel.State{Platform: "test", BotID: bot, Connected: online, Online: online, Reason: reason})
	}
}

// Send delivers out, only through the platform's connection: a channel
// that is not connected is offline. Some texts fail on purpose.
func (c *testChannel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	switch out.Text {
	case "reject":
		return channel.Receipt{}, fmt.Errorf("test: %w", &channel.RejectedError{Code: "40001", Reason: "not allowed"})
	case "slow down":
		return channel.Receipt{}, &channel.RateLimitedError{RetryAfter: 3 * time.Second}
	case "muted":
		return channel.Receipt{}, &channel.MutedError{Until: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	case "kicked":
		return channel.Receipt{}, fmt.Errorf("test: gone: %w", channel.ErrKicked)
	}
	c.pl.mu.Lock()
	defer c.pl.mu.Unlock()
	if c.pl.current != c.id {
		return channel.Receipt{}, fmt.Errorf("test: %s is not connected: %w", c.id, channel.ErrOffline)
	}
	if out.Text == "flaky" && !c.pl.flaky[out.IdempotencyKey] {
		c.pl.flaky[out.IdempotencyKey] = true
		return channel.Receipt{}, errors.New("test: connection reset")
	}
	d := c.pl.appendLocked(delivery{by: c.id, out: out})
	return channel.Receipt{MessageIDs: []string{d.id}, Time: d.at}, nil
}

// FetchHistory pages the messages of q.Chat, newest first (the cursor
// counts the newer ones already read), only through the platform's
// connection: a channel that is not connected is offline. Some chats fail
// on purpose.
func (c *testChannel) FetchHistory(ctx context.Context, q channel.HistoryQuery) (channel.HistoryPage, error) {
	switch q.Chat.ID {
	case "slow":
		return channel.HistoryPage{}, &channel.RateLimitedError{RetryAfter: 2 * time.Second}
	case "gone":
		return channel.HistoryPage{}, fmt.Errorf("test: removed from the group: %w", channel.ErrKicked)
	case "denied":
		return channel.HistoryPage{}, fmt.Errorf("test: %w", &channel.RejectedError{Code: "403", Reason: "no history permission"})
	case "down":
		return channel.HistoryPage{}, fmt.Errorf("test: history service down: %w", channel.ErrOffline)
	}
	if err := ctx.Err(); err != nil {
		return channel.HistoryPage{}, err
	}
	skip := 0
	if q.Cursor != "" {
		n, err := strconv.Atoi(q.Cursor)
		if err != nil || n < 0 {
			return channel.HistoryPage{}, fmt.Errorf("test: bad cursor %q", q.Cursor)
		}
		skip = n
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 20
	}
	c.mu.Lock()
	bot := c.botID
	c.mu.Unlock()
	c.pl.mu.Lock()
	defer c.pl.mu.Unlock()
	if c.pl.current != c.id {
		return channel.HistoryPage{}, fmt.Errorf("test: %s is not connected: %w", c.id, channel.ErrOffline)
	}
	var all []delivery
	for i := len(c.pl.delivered) - 1; i >= 0; i-- {
		if d := c.pl.delivered[i]; d.out.Chat == q.Chat {
			all = append(all, d)
		}
	}
	var page channel.HistoryPage
	for i := skip; i < len(all) && i < skip+limit; i++ {
		page.Events = append(page.Events, all[i].event(bot))
	}
	if skip+limit < len(all) {
		page.Next = strconv.Itoa(skip + limit)
	}
	return page, nil
}

// stateSink records the states a Share reports.
type stateSink struct {
	mu     sync.Mutex
	states []channel.State
}

func (s *stateSink) HandleEvent(context.Context, channel.Event) error { return nil }

func (s *stateSink) ReportState(_ context.Context, st channel.State) {
	s.mu.Lock()
	s.states = append(s.states, st)
	s.mu.Unlock()
}

func (s *stateSink) last() channel.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.states) == 0 {
		return channel.State{}
	}
	return s.states[len(s.states)-1]
}

// proc is one process: a store, a channel and its Share.
type proc struct {
	id   string
	db   *postgres.DB
	ch   *testChannel
	sh   channel.Channel
	sink *stateSink

	cancel context.CancelFunc
	done   chan error
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openDB opens a store on the schema of url, closed when t ends.
func openDB(t *testing.T, url string, clk clock.Clock) *postgres.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := postgres.Open(ctx, url, postgres.Options{Logger: quiet(), Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newProc makes a process; run starts its Share's Run.
func newProc(t *testing.T, url, id string, pl *platform, run bool, opt cluster.Options) *proc {
	t.Helper()
	p := &proc{id: id, db: openDB(t, url, opt.Clock), ch: newTestChannel(id, pl), sink: &stateSink{}}
	if opt.Name == "" {
		opt.Name = "bot/test#0"
	}
	opt.Logger = quiet()
	p.sh = cluster.Share(p.ch, p.db, opt)
	if run {
		p.start(t)
	}
	return p
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan error, 1)
	go func() { p.done <- p.sh.Run(ctx, p.sink) }()
	t.Cleanup(func() { p.stop(t) })
}

// stop ends the process's Run and returns its error.
func (p *proc) stop(t *testing.T) error {
	t.Helper()
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(waitFor):
		t.Fatalf("process %s: Run did not return", p.id)
		return nil
	}
}

// waitHolder waits until one of procs holds the connection and returns
// it.
func waitHolder(t *testing.T, pl *platform, procs ...*proc) *proc {
	t.Helper()
	var h *proc
	require.Eventually(t, func() bool {
		id := pl.holder()
		for _, p := range procs {
			if p.id == id {
				h = p
				return true
			}
		}
		return false
	}, waitFor, tick, "nobody took the connection")
	return h
}

// waitOnline waits until p's pipeline was told the connection is online.
func waitOnline(t *testing.T, p *proc) {
	t.Helper()
	require.Eventually(t, func() bool {
		st := p.sink.last()
		return st.Connected && st.Online
	}, waitFor, tick, "process %s was not told the connection is online", p.id)
}

// waitPublished waits until the store says name is held and online, as
// a follower's Send checks.
func waitPublished(t *testing.T, db *postgres.DB, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := db.LoadState(t.Context(), name)
		require.NoError(t, err)
		return st.Held && st.State.Connected && st.State.Online
	}, waitFor, tick, "the holder did not publish that it is online")
}

// followers returns the procs that are not h.
func followers(h *proc, procs ...*proc) []*proc {
	var out []*proc
	for _, p := range procs {
		if p != h {
			out = append(out, p)
		}
	}
	return out
}

// rawHold holds name on db directly (a holder whose channel does
// nothing) and publishes it online.
func rawHold(t *testing.T, db *postgres.DB, name string) cluster.Holding {
	t.Helper()
	var h cluster.Holding
	require.Eventually(t, func() bool {
		var err error
		h, err = db.TryHold(t.Context(), name)
		require.NoError(t, err)
		return h != nil
	}, waitFor, tick)
	t.Cleanup(func() { _ = h.Release() })
	require.NoError(t, h.PublishState(t.Context(), channel.State{Platform: "test", BotID: "bot-1", Connected: true, Online: true}))
	return h
}

var chat = channel.Chat{Kind: channel.Group, ID: "g1"}

// Exactly one process runs the connection; the others relay their sends
// through it, each delivered once with the holder's receipt, and report
// the holder's state to their pipelines.
func TestShareOneHolderRelaysForTheOthers(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	a := newProc(t, url, "a", pl, true, cluster.Options{})
	b := newProc(t, url, "b", pl, true, cluster.Options{})
	c := newProc(t, url, "c", pl, true, cluster.Options{})
	h := waitHolder(t, pl, a, b, c)
	for _, p := range []*proc{a, b, c} {
		waitOnline(t, p)
		require.Equal(t, "bot-1", p.sink.last().BotID)
		require.Equal(t, "test", p.sink.last().Platform)
	}
	require.Equal(t, []string{h.id}, pl.runs, "one process ran the channel")
	require.False(t, pl.overlapped())

	ctx := t.Context()
	for _, f := range followers(h, a, b, c) {
		text := "hello from " + f.id
		rc, err := f.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: text, IdempotencyKey: "k-" + f.id})
		require.NoError(t, err)
		got := pl.deliveries(text)
		require.Len(t, got, 1)
		require.Equal(t, h.id, got[0].by, "the holder delivered it")
		require.Equal(t, []string{got[0].id}, rc.MessageIDs, "the follower got the holder's receipt")
		require.False(t, rc.Time.IsZero())

		// The same chunk again: its receipt, nothing sent.
		again, err := f.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: text, IdempotencyKey: "k-" + f.id})
		require.NoError(t, err)
		require.Equal(t, rc.MessageIDs, again.MessageIDs)
		require.True(t, rc.Time.Equal(again.Time))
		require.Len(t, pl.deliveries(text), 1)

		// Without a key every send is its own.
		_, err = f.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: "nokey " + f.id})
		require.NoError(t, err)
		_, err = f.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: "nokey " + f.id})
		require.NoError(t, err)
		require.Len(t, pl.deliveries("nokey "+f.id), 2)
	}

	// Two processes asking for the same chunk at once: one delivery.
	fs := followers(h, a, b, c)
	var wg sync.WaitGroup
	receipts := make([]channel.Receipt, len(fs))
	errs := make([]error, len(fs))
	for i, f := range fs {
		wg.Go(func() {
			receipts[i], errs[i] = f.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: "together", IdempotencyKey: "k-together"})
		})
	}
	wg.Wait()
	for i := range fs {
		require.NoError(t, errs[i])
		require.Equal(t, receipts[0].MessageIDs, receipts[i].MessageIDs)
	}
	require.Len(t, pl.deliveries("together"), 1)

	// The holder sends directly.
	_, err := h.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: "from the holder"})
	require.NoError(t, err)
	require.Len(t, pl.deliveries("from the holder"), 1)

	// The holder's state changes reach the followers.
	h.ch.report(ctx, false, "account offline")
	for _, f := range fs {
		require.Eventually(t, func() bool { return !f.sink.last().Online }, waitFor, tick)
		_, err := f.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: "while offline"})
		require.ErrorIs(t, err, channel.ErrOffline, "a follower fails fast while the holder is offline")
	}
	h.ch.report(ctx, true, "back")
	for _, f := range fs {
		waitOnline(t, f)
	}
	require.Empty(t, pl.deliveries("while offline"))
	require.Equal(t, []string{h.id}, pl.runs)
}

// When the holder's store connection goes away (as when its process is
// killed), another process takes over within a few seconds, and sends are
// relayed to the new holder.
func TestShareTakeoverWhenTheHolderDies(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	a := newProc(t, url, "a", pl, true, cluster.Options{})
	b := newProc(t, url, "b", pl, true, cluster.Options{})
	c := newProc(t, url, "c", pl, true, cluster.Options{})
	h := waitHolder(t, pl, a, b, c)
	for _, p := range []*proc{a, b, c} {
		waitOnline(t, p)
	}

	start := time.Now()
	require.NoError(t, h.db.Close())
	rest := followers(h, a, b, c)
	h2 := waitHolder(t, pl, rest...)
	took := time.Since(start)
	t.Logf("taken over by %s after %s", h2.id, took)
	require.Less(t, took, 5*time.Second)
	require.False(t, pl.overlapped(), "the dead holder stopped its channel before another started")
	require.Equal(t, []string{h.id, h2.id}, pl.runs)
	require.Eventually(t, func() bool { return !h.sink.last().Connected }, waitFor, tick,
		"the process that lost the hold reports the connection down")

	for _, f := range followers(h2, rest...) {
		waitPublished(t, f.db, "bot/test#0")
		waitOnline(t, f)
		rc, err := f.sh.Send(t.Context(), channel.Outgoing{Chat: chat, Text: "after " + f.id, IdempotencyKey: "after-" + f.id})
		require.NoError(t, err)
		got := pl.deliveries("after " + f.id)
		require.Len(t, got, 1)
		require.Equal(t, h2.id, got[0].by)
		require.Equal(t, []string{got[0].id}, rc.MessageIDs)
	}
	_, err := h.sh.Send(t.Context(), channel.Outgoing{Chat: chat, Text: "from the dead"})
	require.Error(t, err, "a process whose store is closed cannot send")
}

// A send the holder had claimed when it died has an unknown fate: the next
// holder marks it unconfirmed, its follower gets channel.ErrUnconfirmed,
// and it is never sent by the relay on its own. Asked again (the ledger
// found it missing), it is sent.
func TestShareClaimedByADeadHolderIsUnconfirmed(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	const name = "bot/test#0"
	dead := openDB(t, url, nil)
	hold := rawHold(t, dead, name)
	f := newProc(t, url, "f", pl, false, cluster.Options{Name: name})

	type result struct {
		rc  channel.Receipt
		err error
	}
	res := make(chan result, 1)
	out := channel.Outgoing{Chat: chat, Text: "in flight", IdempotencyKey: "k-flight"}
	go func() {
		rc, err := f.sh.Send(t.Context(), out)
		res <- result{rc, err}
	}()
	var claimed []cluster.Request
	require.Eventually(t, func() bool {
		var err error
		claimed, err = hold.Claim(t.Context(), 10)
		require.NoError(t, err)
		return len(claimed) > 0
	}, waitFor, tick)
	require.Len(t, claimed, 1)
	require.Equal(t, out, claimed[0].Out, "the send crosses as it was")
	require.NoError(t, dead.Close()) // the holder dies while sending

	n := newProc(t, url, "n", pl, true, cluster.Options{Name: name})
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, channel.ErrUnconfirmed)
		require.Equal(t, channel.ClassTransient, channel.Classify(r.err))
	case <-time.After(waitFor):
		t.Fatal("the follower was not told")
	}
	require.Equal(t, "n", waitHolder(t, pl, n).id)
	waitOnline(t, n)
	time.Sleep(300 * time.Millisecond) // a few relay rounds of the new holder
	require.Empty(t, pl.deliveries("in flight"), "an unconfirmed send is not sent again on its own")
	waitPublished(t, f.db, name)

	// The same chunk asked again is sent (the new holder relays it for f).
	rc, err := f.sh.Send(t.Context(), out)
	require.NoError(t, err)
	got := pl.deliveries("in flight")
	require.Len(t, got, 1)
	require.Equal(t, []string{got[0].id}, rc.MessageIDs)
	require.Equal(t, "n", got[0].by)
}

// Errors of the holder's send reach the follower with their class and
// fields; a failed chunk may be asked again.
func TestShareRelaysErrors(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	a := newProc(t, url, "a", pl, true, cluster.Options{})
	waitHolder(t, pl, a)
	waitOnline(t, a)
	f := newProc(t, url, "f", pl, false, cluster.Options{})
	waitPublished(t, f.db, "bot/test#0")
	ctx := t.Context()
	send := func(text, key string) error {
		_, err := f.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: text, IdempotencyKey: key})
		return err
	}

	err := send("reject", "k1")
	var rj *channel.RejectedError
	require.ErrorAs(t, err, &rj)
	require.Equal(t, "40001", rj.Code)
	require.Equal(t, "not allowed", rj.Reason)
	require.ErrorIs(t, err, channel.ErrRejected)
	require.True(t, channel.Classify(err).Definitive())
	require.Contains(t, err.Error(), "not allowed")

	err = send("slow down", "k2")
	var rl *channel.RateLimitedError
	require.ErrorAs(t, err, &rl)
	require.Equal(t, 3*time.Second, rl.RetryAfter)
	require.ErrorIs(t, err, channel.ErrRateLimited)

	err = send("muted", "")
	var mu *channel.MutedError
	require.ErrorAs(t, err, &mu)
	require.True(t, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).Equal(mu.Until))

	require.ErrorIs(t, send("kicked", ""), channel.ErrKicked)

	// A transient failure, then the same chunk again: sent this time.
	err = send("flaky", "k-flaky")
	require.Error(t, err)
	require.Equal(t, channel.ClassTransient, channel.Classify(err))
	require.Empty(t, pl.deliveries("flaky"))
	require.NoError(t, send("flaky", "k-flaky"))
	require.Len(t, pl.deliveries("flaky"), 1)
}

// A follower whose caller gives up while its send is still pending
// withdraws it: no holder sends it later.
func TestShareWithdrawsWhenTheCallerGivesUp(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	const name = "bot/test#0"
	stuck := openDB(t, url, nil)
	hold := rawHold(t, stuck, name) // holds, never claims
	f := newProc(t, url, "f", pl, false, cluster.Options{Name: name})

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err := f.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: "given up", IdempotencyKey: "k-given-up"})
	require.ErrorIs(t, err, context.Canceled)
	claimed, err := hold.Claim(t.Context(), 10)
	require.NoError(t, err)
	require.Empty(t, claimed, "the withdrawn send is not there to claim")

	// A real holder takes over; it never sends the withdrawn one.
	require.NoError(t, hold.Release())
	n := newProc(t, url, "n", pl, true, cluster.Options{Name: name})
	waitHolder(t, pl, n)
	waitPublished(t, f.db, name)
	_, err = f.sh.Send(t.Context(), channel.Outgoing{Chat: chat, Text: "later", IdempotencyKey: "k-later"})
	require.NoError(t, err)
	require.Len(t, pl.deliveries("later"), 1)
	require.Empty(t, pl.deliveries("given up"))
}

// A send the holder does not take within the pending timeout (a stuck
// holder) is withdrawn and fails with channel.ErrOffline.
func TestShareGivesUpOnAStuckHolder(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	const name = "bot/test#0"
	clk := clock.NewFake(time.Now())
	stuck := openDB(t, url, nil)
	hold := rawHold(t, stuck, name)
	f := newProc(t, url, "f", pl, false, cluster.Options{Name: name, Clock: clk})

	done := make(chan error, 1)
	go func() {
		_, err := f.sh.Send(t.Context(), channel.Outgoing{Chat: chat, Text: "stuck", IdempotencyKey: "k-stuck"})
		done <- err
	}()
	// The follower waits on its pending timer and its re-check.
	require.Eventually(t, func() bool { return clk.Pending() >= 2 }, waitFor, tick)
	clk.Advance(cluster.DefaultPendingTimeout)
	select {
	case err := <-done:
		require.ErrorIs(t, err, channel.ErrOffline)
	case <-time.After(waitFor):
		t.Fatal("the send did not give up")
	}
	claimed, err := hold.Claim(t.Context(), 10)
	require.NoError(t, err)
	require.Empty(t, claimed, "the send was withdrawn")
}

// Without a holder, or with one that is not online, a follower fails
// fast.
func TestShareFailsFastWithoutAnOnlineHolder(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	const name = "bot/test#0"
	f := newProc(t, url, "f", pl, false, cluster.Options{Name: name})
	_, err := f.sh.Send(t.Context(), channel.Outgoing{Chat: chat, Text: "nobody"})
	require.ErrorIs(t, err, channel.ErrOffline)

	hold := rawHold(t, openDB(t, url, nil), name)
	require.NoError(t, hold.PublishState(t.Context(), channel.State{Platform: "test", Connected: true, Reason: "logging in"}))
	_, err = f.sh.Send(t.Context(), channel.Outgoing{Chat: chat, Text: "not yet"})
	require.ErrorIs(t, err, channel.ErrOffline)
	require.Contains(t, err.Error(), "logging in")
}

// A follower reports the holder's published state, and "not connected"
// once nobody holds the connection.
func TestShareFollowerReportsTheHoldersState(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	const name = "bot/test#0"
	db := openDB(t, url, nil)
	hold := rawHold(t, db, name)
	f := newProc(t, url, "f", pl, true, cluster.Options{Name: name})
	require.Eventually(t, func() bool {
		st := f.sink.last()
		return st.Connected && st.Online && st.BotID == "bot-1" && st.Platform == "test"
	}, waitFor, tick)

	require.NoError(t, hold.PublishState(t.Context(), channel.State{Platform: "test", BotID: "bot-1", Connected: true, Reason: "account frozen"}))
	require.Eventually(t, func() bool {
		st := f.sink.last()
		return st.Connected && !st.Online
	}, waitFor, tick)
	require.Contains(t, f.sink.last().Reason, "account frozen")
	require.Empty(t, pl.runs, "the follower never ran the channel")

	// The holder goes: the follower takes over and reports its own
	// channel's state.
	require.NoError(t, hold.Release())
	waitHolder(t, pl, f)
	waitOnline(t, f)
	require.NoError(t, f.stop(t))
	require.False(t, f.sink.last().Connected, "Run reports the connection down as it returns")

	st, err := db.LoadState(t.Context(), name)
	require.NoError(t, err)
	require.False(t, st.Held, "Run gave the hold up")
	require.False(t, st.State.Connected)
}

// failingChannel's Run fails at once.
type failingChannel struct{ *testChannel }

var errBroken = errors.New("test: cannot listen")

func (failingChannel) Run(context.Context, channel.Sink) error { return errBroken }

// When the wrapped channel's Run fails for good, Run returns its error and
// gives the hold up.
func TestShareReturnsTheChannelsFailure(t *testing.T) {
	url := pgtest.Schema(t)
	db := openDB(t, url, nil)
	sh := cluster.Share(failingChannel{newTestChannel("x", newPlatform())}, db, cluster.Options{Name: "n", Logger: quiet()})
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	require.ErrorIs(t, sh.Run(ctx, &stateSink{}), errBroken)
	st, err := db.LoadState(t.Context(), "n")
	require.NoError(t, err)
	require.False(t, st.Held)
	h, err := db.TryHold(t.Context(), "n")
	require.NoError(t, err)
	require.NotNil(t, h, "the hold is free again")
	require.NoError(t, h.Release())
}

// The store's hold: one holder per name, released with its connection,
// and names apart.
func TestStoreHold(t *testing.T) {
	url := pgtest.Schema(t)
	a := openDB(t, url, nil)
	b := openDB(t, url, nil)
	ctx := t.Context()

	ha, err := a.TryHold(ctx, "one")
	require.NoError(t, err)
	require.NotNil(t, ha)
	hb, err := b.TryHold(ctx, "one")
	require.NoError(t, err)
	require.Nil(t, hb, "held by a")
	other, err := b.TryHold(ctx, "two")
	require.NoError(t, err)
	require.NotNil(t, other, "another name is another hold")
	require.NoError(t, other.Release())

	st, err := b.LoadState(ctx, "one")
	require.NoError(t, err)
	require.True(t, st.Held)
	require.False(t, st.State.Connected, "a new holder starts not connected")
	require.NoError(t, ha.PublishState(ctx, channel.State{Platform: "p", BotID: "b1", Connected: true, Online: true, Reason: "up"}))
	st, err = b.LoadState(ctx, "one")
	require.NoError(t, err)
	require.Equal(t, channel.State{Platform: "p", BotID: "b1", Connected: true, Online: true, Reason: "up"}, st.State)

	// Closing the store ends the hold: Lost, and b may take it.
	require.NoError(t, a.Close())
	select {
	case <-ha.Lost():
	case <-time.After(waitFor):
		t.Fatal("the hold was not lost")
	}
	require.ErrorIs(t, ha.PublishState(ctx, channel.State{}), cluster.ErrLost)
	require.Eventually(t, func() bool {
		hb, err = b.TryHold(ctx, "one")
		require.NoError(t, err)
		return hb != nil
	}, waitFor, tick)
	st, err = b.LoadState(ctx, "one")
	require.NoError(t, err)
	require.True(t, st.Held)
	require.False(t, st.State.Connected, "the dead holder's state is not trusted")
	require.Equal(t, "b1", st.State.BotID, "the account stays known")

	require.NoError(t, hb.Release())
	require.NoError(t, hb.Release(), "idempotent")
	<-hb.Lost()
	st, err = b.LoadState(ctx, "one")
	require.NoError(t, err)
	require.False(t, st.Held)
	_, err = hb.Claim(ctx, 1)
	require.ErrorIs(t, err, cluster.ErrLost)
}

// The relay table: keyed requests, outcomes only from the hold that
// claimed them, expiry of pending ones and pruning of old finished ones.
func TestStoreRelay(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	db := openDB(t, url, clk)
	ctx := t.Context()
	h, err := db.TryHold(ctx, "n")
	require.NoError(t, err)
	require.NotNil(t, h)
	defer func() { _ = h.Release() }()

	out := channel.Outgoing{Chat: chat, Text: "hi", ReplyTo: "r1", Mentions: []string{"u1"},
		Media: []channel.Media{{URL: "https://example.com/a.png", MIME: "image/png"}}, IdempotencyKey: "k"}
	r1, err := db.Request(ctx, "n", out, cluster.RequestOptions{Pending: time.Minute})
	require.NoError(t, err)
	require.Equal(t, cluster.StatusPending, r1.Status)
	r2, err := db.Request(ctx, "n", out, cluster.RequestOptions{Pending: time.Minute})
	require.NoError(t, err)
	require.Equal(t, r1.ID, r2.ID, "one request per key")

	reqs, err := h.Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, reqs, 1)
	require.Equal(t, out, reqs[0].Out)
	ok, err := db.Withdraw(ctx, r1.ID)
	require.NoError(t, err)
	require.False(t, ok, "a claimed request cannot be withdrawn")
	res, err := db.Result(ctx, r1.ID)
	require.NoError(t, err)
	require.Equal(t, cluster.StatusClaimed, res.Status)

	rc := channel.Receipt{MessageIDs: []string{"m1", "m2"}, Time: time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC)}
	ok, err = h.Finish(ctx, r1.ID, cluster.Result{Status: cluster.StatusDone, Receipt: rc})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = h.Finish(ctx, r1.ID, cluster.Result{Status: cluster.StatusFailed})
	require.NoError(t, err)
	require.False(t, ok, "finished once")
	r3, err := db.Request(ctx, "n", out, cluster.RequestOptions{})
	require.NoError(t, err)
	require.Equal(t, cluster.Result{ID: r1.ID, Status: cluster.StatusDone, Receipt: rc}, r3, "a done chunk answers with its receipt")

	// A failed request asked again is pending anew.
	f1, err := db.Request(ctx, "n", channel.Outgoing{Text: "f", IdempotencyKey: "kf"}, cluster.RequestOptions{})
	require.NoError(t, err)
	reqs, err = h.Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, reqs, 1)
	ok, err = h.Finish(ctx, f1.ID, cluster.Result{Status: cluster.StatusFailed, Error: cluster.RecordError(channel.ErrOffline)})
	require.NoError(t, err)
	require.True(t, ok)
	res, err = db.Result(ctx, f1.ID)
	require.NoError(t, err)
	require.Equal(t, cluster.StatusFailed, res.Status)
	require.ErrorIs(t, res.Error.Err(), channel.ErrOffline)
	f2, err := db.Request(ctx, "n", channel.Outgoing{Text: "f", IdempotencyKey: "kf"}, cluster.RequestOptions{})
	require.NoError(t, err)
	require.Equal(t, cluster.Result{ID: f1.ID, Status: cluster.StatusPending}, f2)

	// Past its pending limit a request is cancelled, not claimed.
	clk.Advance(2 * time.Minute)
	e1, err := db.Request(ctx, "n", channel.Outgoing{Text: "e"}, cluster.RequestOptions{Pending: time.Minute})
	require.NoError(t, err)
	clk.Advance(2 * time.Minute)
	reqs, err = h.Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, reqs, 1, "the unlimited one only")
	require.Equal(t, f1.ID, reqs[0].ID)
	res, err = db.Result(ctx, e1.ID)
	require.NoError(t, err)
	require.Equal(t, cluster.StatusCancelled, res.Status)

	// A new holder finds f claimed by the old one: unconfirmed.
	require.NoError(t, h.Release())
	h2, err := db.TryHold(ctx, "n")
	require.NoError(t, err)
	require.NotNil(t, h2)
	defer func() { _ = h2.Release() }()
	res, err = db.Result(ctx, f1.ID)
	require.NoError(t, err)
	require.Equal(t, cluster.StatusUnconfirmed, res.Status)
	ok, err = h.Finish(ctx, f1.ID, cluster.Result{Status: cluster.StatusDone})
	require.NoError(t, err)
	require.False(t, ok, "the old hold's late outcome is ignored")

	// Old finished requests are pruned.
	clk.Advance(2 * time.Hour)
	require.NoError(t, h2.Prune(ctx, time.Hour))
	for _, id := range []int64{r1.ID, f1.ID, e1.ID} {
		_, err = db.Result(ctx, id)
		require.ErrorIs(t, err, cluster.ErrUnknownRequest)
	}
}

// When the server ends the holder's lock session (a network failure, an
// administrator), the holder notices within its next check and stops its
// channel; then one process holds the connection again (normally the
// other one: a process that lost the hold waits a retry before it tries
// again).
func TestShareHolderNoticesItsSessionEnded(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	a := newProc(t, url, "a", pl, true, cluster.Options{})
	b := newProc(t, url, "b", pl, true, cluster.Options{})
	h := waitHolder(t, pl, a, b)
	waitOnline(t, a)
	waitOnline(t, b)

	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	var n int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND ((classid::int8 << 32) | objid::int8) = hashtextextended($1, 0)`,
		h.db.Schema()+":hold:bot/test#0").Scan(&n))
	require.Equal(t, 1, n, "the holder's lock session")

	require.Eventually(t, func() bool {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		return len(pl.runs) >= 2 && pl.running == 1 && pl.current != ""
	}, waitFor, tick, "the old holder stopped its channel and a process holds the connection again")
	h2 := waitHolder(t, pl, a, b)
	f := followers(h2, a, b)[0]
	waitPublished(t, f.db, "bot/test#0")
	_, err = f.sh.Send(t.Context(), channel.Outgoing{Chat: chat, Text: "relayed now", IdempotencyKey: "k-relayed"})
	require.NoError(t, err)
	got := pl.deliveries("relayed now")
	require.Len(t, got, 1)
	require.Equal(t, h2.id, got[0].by)
}
