package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/cluster"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/outbound"
)

// historyOf returns the history capability a Share exposes, failing the
// test when it exposes none.
func historyOf(t *testing.T, ch channel.Channel) channel.HistoryFetcher {
	t.Helper()
	hf, ok := channel.As[channel.HistoryFetcher](ch)
	require.True(t, ok, "the Share exposes channel.HistoryFetcher")
	return hf
}

// readAll pages q.Chat's history to its end through hf.
func readAll(t *testing.T, hf channel.HistoryFetcher, q channel.HistoryQuery) []channel.HistoryPage {
	t.Helper()
	var pages []channel.HistoryPage
	for range 100 {
		p, err := hf.FetchHistory(t.Context(), q)
		require.NoError(t, err)
		pages = append(pages, p)
		if p.Next == "" {
			return pages
		}
		q.Cursor = p.Next
	}
	t.Fatal("the history did not end")
	return nil
}

// A follower reads a chat's history through the holder: the pages, their
// events with every field and the cursors are the ones the holder's own
// channel gives.
func TestShareRelaysHistoryReads(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	a := newProc(t, url, "a", pl, true, cluster.Options{})
	waitHolder(t, pl, a)
	waitOnline(t, a)
	f := newProc(t, url, "f", pl, false, cluster.Options{})
	waitPublished(t, f.db, "bot/test#0")
	ctx := t.Context()

	pl.say(chat, "u1", "hello bot")
	first, err := f.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: "hi there", ReplyTo: "m1", Mentions: []string{"u1"},
		Media: []channel.Media{{URL: "https://example.com/a.png", MIME: "image/png", Size: 42}}, IdempotencyKey: "k1"})
	require.NoError(t, err)
	for i := range 4 {
		pl.say(chat, "u2", fmt.Sprintf("chatter %d", i))
	}
	last, err := a.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: "bye"})
	require.NoError(t, err)
	pl.say(channel.Chat{Kind: channel.Private, ID: "u3"}, "u3", "elsewhere")

	// f's own channel is not connected: only the holder can read.
	_, err = f.ch.FetchHistory(ctx, channel.HistoryQuery{Chat: chat})
	require.ErrorIs(t, err, channel.ErrOffline)

	q := channel.HistoryQuery{Chat: chat, Limit: 3}
	relayed := readAll(t, historyOf(t, f.sh), q)
	direct := readAll(t, historyOf(t, a.sh), q)
	require.Len(t, relayed, 3, "7 messages in pages of 3")
	require.Equal(t, direct, relayed)
	require.Equal(t, "3", relayed[0].Next)
	require.Equal(t, "6", relayed[1].Next)
	require.Empty(t, relayed[2].Next)

	// Spot checks of what crossed.
	newest := relayed[0].Events[0]
	require.Equal(t, channel.KindSelf, newest.Kind)
	require.Equal(t, last.MessageIDs[0], newest.MessageID)
	require.True(t, last.Time.Equal(newest.Time))
	require.Equal(t, time.UTC, newest.Time.Location())
	require.Equal(t, "bye", newest.Text())
	mine := relayed[1].Events[2]
	require.Equal(t, first.MessageIDs[0], mine.MessageID)
	require.Equal(t, []channel.Segment{channel.Quote("m1"), channel.Mention("u1"), channel.Text("hi there"),
		channel.Image(channel.Media{URL: "https://example.com/a.png", MIME: "image/png", Size: 42})}, mine.Segments)
	require.Equal(t, &channel.Quoted{MessageID: "m1", Sender: channel.Sender{ID: "u1"}, Text: "quoted"}, mine.Quoted)
	require.JSONEq(t, `{"message_id":"`+mine.MessageID+`"}`, string(mine.Raw))
	oldest := relayed[2].Events[0]
	require.Equal(t, channel.KindMessage, oldest.Kind)
	require.Equal(t, channel.Sender{ID: "u1", Name: "User u1", Role: channel.RoleMember}, oldest.Sender)
	require.Equal(t, "hello bot", oldest.Text())

	// A chat without messages: an empty last page.
	empty, err := historyOf(t, f.sh).FetchHistory(ctx, channel.HistoryQuery{Chat: channel.Chat{Kind: channel.Group, ID: "quiet"}})
	require.NoError(t, err)
	require.Empty(t, empty.Events)
	require.Empty(t, empty.Next)

	// Reads from several goroutines at once.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			p, err := historyOf(t, f.sh).FetchHistory(ctx, q)
			if err == nil && !slices.EqualFunc(p.Events, direct[0].Events, func(a, b channel.Event) bool { return a.MessageID == b.MessageID }) {
				err = fmt.Errorf("read %d: another page", i)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, pl.deliveries("bye"), 1, "reading sends nothing")
}

// Errors of the holder's read reach the follower with their class and
// fields.
func TestShareRelaysHistoryErrors(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	a := newProc(t, url, "a", pl, true, cluster.Options{})
	waitHolder(t, pl, a)
	waitOnline(t, a)
	f := newProc(t, url, "f", pl, false, cluster.Options{})
	waitPublished(t, f.db, "bot/test#0")
	read := func(chatID string) error {
		_, err := historyOf(t, f.sh).FetchHistory(t.Context(), channel.HistoryQuery{Chat: channel.Chat{Kind: channel.Group, ID: chatID}})
		return err
	}
	same := func(chatID string, got error) {
		_, want := a.ch.FetchHistory(t.Context(), channel.HistoryQuery{Chat: channel.Chat{Kind: channel.Group, ID: chatID}})
		require.Error(t, want)
		require.Equal(t, channel.Classify(want), channel.Classify(got), chatID)
		require.Contains(t, got.Error(), want.Error())
		var re *cluster.RemoteError
		require.ErrorAs(t, got, &re, "the holder's error")
	}

	err := read("slow")
	var rl *channel.RateLimitedError
	require.ErrorAs(t, err, &rl)
	require.Equal(t, 2*time.Second, rl.RetryAfter)
	require.ErrorIs(t, err, channel.ErrRateLimited)
	same("slow", err)

	err = read("gone")
	require.ErrorIs(t, err, channel.ErrKicked)
	same("gone", err)

	err = read("denied")
	var rj *channel.RejectedError
	require.ErrorAs(t, err, &rj)
	require.Equal(t, "403", rj.Code)
	require.Equal(t, "no history permission", rj.Reason)
	same("denied", err)

	err = read("down")
	require.ErrorIs(t, err, channel.ErrOffline)
	same("down", err)
}

// Without a holder, or with one that is not online, a follower's read
// fails at once and asks nothing.
func TestShareHistoryFailsFastWithoutAnOnlineHolder(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	const name = "bot/test#0"
	f := newProc(t, url, "f", pl, false, cluster.Options{Name: name})
	hf := historyOf(t, f.sh)
	_, err := hf.FetchHistory(t.Context(), channel.HistoryQuery{Chat: chat})
	require.ErrorIs(t, err, channel.ErrOffline)
	require.Contains(t, err.Error(), "no process holds the connection")

	hold := rawHold(t, openDB(t, url, nil), name)
	require.NoError(t, hold.PublishState(t.Context(), channel.State{Platform: "test", Connected: true, Reason: "logging in"}))
	_, err = hf.FetchHistory(t.Context(), channel.HistoryQuery{Chat: chat})
	require.ErrorIs(t, err, channel.ErrOffline)
	require.Contains(t, err.Error(), "logging in")
	claimed, err := hold.Claim(t.Context(), 10)
	require.NoError(t, err)
	require.Empty(t, claimed, "nothing was asked")
}

// historyless is a channel with nothing but the three methods of
// channel.Channel.
type historyless struct{ channel.Channel }

// historyWrapper wraps a channel that reads history, as another
// decorator would.
type historyWrapper struct{ inner channel.Channel }

func (w historyWrapper) Name() string                                  { return w.inner.Name() }
func (w historyWrapper) Run(ctx context.Context, s channel.Sink) error { return w.inner.Run(ctx, s) }
func (w historyWrapper) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	return w.inner.Send(ctx, out)
}
func (w historyWrapper) Unwrap() channel.Channel { return w.inner }

// channel.As finds the Share's history capability only when the wrapped
// channel (or a channel it wraps) has it, and then the Share answers for
// it itself; capabilities it does not forward (the text limit) are found
// through Unwrap.
func TestShareExposesHistoryOnlyWhenTheChannelHasIt(t *testing.T) {
	t.Parallel()
	var st cluster.Store = nopStore{}
	tc := newTestChannel("a", newPlatform())

	bare := historyless{tc}
	sh := cluster.Share(bare, st, cluster.Options{})
	_, ok := channel.As[channel.HistoryFetcher](sh)
	require.False(t, ok, "no history: the Share does not claim it")
	_, ok = sh.(channel.Forwarder)
	require.True(t, ok, "a forwarder: its capabilities are found with channel.As only")
	require.Equal(t, channel.Channel(bare), sh.(channel.Wrapper).Unwrap())

	sh = cluster.Share(tc, st, cluster.Options{})
	hf, ok := channel.As[channel.HistoryFetcher](sh)
	require.True(t, ok)
	_, direct := hf.(*testChannel)
	require.False(t, direct, "the Share answers, not the adapter it wraps")
	require.Equal(t, channel.Channel(tc), sh.(channel.Wrapper).Unwrap())
	require.Equal(t, channel.TextLimit{Unit: channel.Runes, Max: 321}, channel.LimitOf(sh), "other capabilities through Unwrap")

	deep := historyWrapper{tc}
	sh = cluster.Share(deep, st, cluster.Options{})
	hf, ok = channel.As[channel.HistoryFetcher](sh)
	require.True(t, ok, "found through the wrapped channel's own wrappers")
	_, direct = hf.(*testChannel)
	require.False(t, direct)
	require.Equal(t, channel.Channel(deep), sh.(channel.Wrapper).Unwrap())
}

// A read the holder had taken when it died fails with channel.ErrOffline
// (once the next holder settles it); asked again, it is answered.
func TestShareHistoryReadOfADeadHolderIsOffline(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	const name = "bot/test#0"
	dead := openDB(t, url, nil)
	hold := rawHold(t, dead, name)
	f := newProc(t, url, "f", pl, false, cluster.Options{Name: name})

	q := channel.HistoryQuery{Chat: chat, Cursor: "2", Limit: 5}
	res := make(chan error, 1)
	go func() {
		_, err := historyOf(t, f.sh).FetchHistory(t.Context(), q)
		res <- err
	}()
	var claimed []cluster.Request
	require.Eventually(t, func() bool {
		var err error
		claimed, err = hold.Claim(t.Context(), 10)
		require.NoError(t, err)
		return len(claimed) > 0
	}, waitFor, tick)
	require.Len(t, claimed, 1)
	require.Equal(t, cluster.KindHistory, claimed[0].Kind)
	var got channel.HistoryQuery
	require.NoError(t, json.Unmarshal(claimed[0].Payload, &got))
	require.Equal(t, q, got, "the query crosses as it was")
	require.Equal(t, channel.Outgoing{}, claimed[0].Out)
	require.NoError(t, dead.Close()) // the holder dies while reading

	n := newProc(t, url, "n", pl, true, cluster.Options{Name: name})
	select {
	case err := <-res:
		require.ErrorIs(t, err, channel.ErrOffline)
		require.NotErrorIs(t, err, channel.ErrUnconfirmed, "a read has no effect to be unsure of")
	case <-time.After(waitFor):
		t.Fatal("the follower was not told")
	}
	waitHolder(t, pl, n)
	waitPublished(t, f.db, name)
	pl.say(chat, "u1", "one")
	pl.say(chat, "u1", "two")
	pl.say(chat, "u1", "three")
	page, err := historyOf(t, f.sh).FetchHistory(t.Context(), q)
	require.NoError(t, err)
	require.Len(t, page.Events, 1)
	require.Equal(t, "one", page.Events[0].Text())
}

// A read the holder does not take within the pending timeout is withdrawn
// and fails with channel.ErrOffline; one whose caller gives up is
// withdrawn too.
func TestShareHistoryGivesUpOnAStuckHolder(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	const name = "bot/test#0"
	clk := clock.NewFake(time.Now())
	hold := rawHold(t, openDB(t, url, nil), name) // holds, never claims
	f := newProc(t, url, "f", pl, false, cluster.Options{Name: name, Clock: clk})
	hf := historyOf(t, f.sh)

	done := make(chan error, 1)
	go func() {
		_, err := hf.FetchHistory(t.Context(), channel.HistoryQuery{Chat: chat})
		done <- err
	}()
	require.Eventually(t, func() bool { return clk.Pending() >= 2 }, waitFor, tick)
	clk.Advance(cluster.DefaultPendingTimeout)
	select {
	case err := <-done:
		require.ErrorIs(t, err, channel.ErrOffline)
		require.Contains(t, err.Error(), "history read")
	case <-time.After(waitFor):
		t.Fatal("the read did not give up")
	}

	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		_, err := hf.FetchHistory(ctx, channel.HistoryQuery{Chat: chat})
		done <- err
	}()
	require.Eventually(t, func() bool { return clk.Pending() >= 2 }, waitFor, tick)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(waitFor):
		t.Fatal("the read did not end with its caller")
	}
	claimed, err := hold.Claim(t.Context(), 10)
	require.NoError(t, err)
	require.Empty(t, claimed, "both reads were withdrawn")
}

// memLedger is an in-memory delivery ledger; intents are dated intentAt.
type memLedger struct {
	mu       sync.Mutex
	intentAt time.Time
	slots    map[string]map[int]outbound.Slot
}

func newMemLedger(intentAt time.Time) *memLedger {
	return &memLedger{intentAt: intentAt, slots: map[string]map[int]outbound.Slot{}}
}

func (l *memLedger) SaveDraft(_ context.Context, d outbound.Draft) (outbound.Draft, error) {
	return d, nil
}

func (l *memLedger) LoadDraft(context.Context, string) (outbound.Draft, bool, error) {
	return outbound.Draft{}, false, nil
}

func (l *memLedger) Slots(_ context.Context, turnID string) ([]outbound.Slot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []outbound.Slot
	for _, s := range l.slots[turnID] {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b outbound.Slot) int { return a.N - b.N })
	return out, nil
}

func (l *memLedger) MarkIntent(_ context.Context, turnID string, n int, fp string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.slots[turnID] == nil {
		l.slots[turnID] = map[int]outbound.Slot{}
	}
	if s, ok := l.slots[turnID][n]; ok && s.State == outbound.SlotSent {
		return nil
	}
	l.slots[turnID][n] = outbound.Slot{TurnID: turnID, N: n, Fingerprint: fp, State: outbound.SlotIntent, IntentAt: l.intentAt}
	return nil
}

func (l *memLedger) MarkSent(_ context.Context, turnID string, n int, ids []string, at time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.slots[turnID] == nil {
		l.slots[turnID] = map[int]outbound.Slot{}
	}
	s := l.slots[turnID][n]
	s.TurnID, s.N, s.State, s.MessageIDs, s.SentAt = turnID, n, outbound.SlotSent, ids, at
	l.slots[turnID][n] = s
	return nil
}

func (l *memLedger) ClearIntent(_ context.Context, turnID string, n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.slots[turnID][n]; ok && s.State == outbound.SlotIntent {
		delete(l.slots[turnID], n)
	}
	return nil
}

func (l *memLedger) slot(turnID string, n int) outbound.Slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slots[turnID][n]
}

// In a follower, the delivery exit settles a chunk whose send was cut
// short by reading the chat's history through the holder, across more
// than one page: a chunk that is there is not sent again, one that is
// proven absent is sent once.
func TestShareFollowerReconcilesThroughRelayedHistory(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	a := newProc(t, url, "a", pl, true, cluster.Options{})
	waitHolder(t, pl, a)
	waitOnline(t, a)
	f := newProc(t, url, "f", pl, false, cluster.Options{})
	waitPublished(t, f.db, "bot/test#0")
	ctx := t.Context()

	// The earlier attempts recorded their intents, then stopped: the
	// first after its chunk reached the chat, the second before.
	led := newMemLedger(time.UnixMilli(1_700_000_000_000).UTC())
	fp := func(text string) string {
		return outbound.Fingerprint("test", "bot-1", chat, 0, outbound.Chunk{Text: text})
	}
	require.NoError(t, led.MarkIntent(ctx, "t-found", 0, fp("the chunk")))
	require.NoError(t, led.MarkIntent(ctx, "t-absent", 0, fp("the lost chunk")))
	rc, err := a.sh.Send(ctx, channel.Outgoing{Chat: chat, Text: "the chunk"})
	require.NoError(t, err)
	for i := range 150 {
		pl.say(chat, "u9", fmt.Sprintf("newer %d", i))
	}

	exit, err := outbound.NewExit(outbound.ExitConfig{Ledger: led, Logger: quiet()})
	require.NoError(t, err)
	session := channel.SessionKey("", "test", "bot-1", chat)

	res, err := exit.Bind(f.sh, "t-found", session, false).SendSlot(ctx, 0, channel.Outgoing{Chat: chat, Text: "the chunk"})
	require.NoError(t, err)
	require.True(t, res.Skipped)
	require.False(t, res.Unknown, "the relayed history settled it")
	require.Equal(t, rc.MessageIDs, res.Receipt.MessageIDs)
	require.Len(t, pl.deliveries("the chunk"), 1, "not sent again")
	require.Equal(t, outbound.SlotSent, led.slot("t-found", 0).State)
	require.Equal(t, rc.MessageIDs, led.slot("t-found", 0).MessageIDs)

	res, err = exit.Bind(f.sh, "t-absent", session, false).SendSlot(ctx, 0, channel.Outgoing{Chat: chat, Text: "the lost chunk"})
	require.NoError(t, err)
	require.False(t, res.Skipped)
	require.False(t, res.Unknown)
	got := pl.deliveries("the lost chunk")
	require.Len(t, got, 1, "proven absent: sent once")
	require.Equal(t, "a", got[0].by, "through the holder")
	require.Equal(t, []string{got[0].id}, res.Receipt.MessageIDs)

	// Without a holder the chunk stays unknown: nothing is sent.
	require.NoError(t, led.MarkIntent(ctx, "t-later", 0, fp("later")))
	require.NoError(t, a.stop(t))
	require.Eventually(t, func() bool {
		st, err := f.db.LoadState(ctx, "bot/test#0")
		require.NoError(t, err)
		return !st.Held
	}, waitFor, tick)
	res, err = exit.Bind(f.sh, "t-later", session, false).SendSlot(ctx, 0, channel.Outgoing{Chat: chat, Text: "later"})
	require.NoError(t, err)
	require.True(t, res.Unknown)
	require.Empty(t, pl.deliveries("later"))
}

// The relay table keeps calls apart from sends: never keyed, the
// payload, answer and body kept as they are, and pruned after
// cluster.ReadKeep.
func TestStoreRelayCalls(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	db := openDB(t, url, clk)
	ctx := t.Context()
	h, err := db.TryHold(ctx, "n")
	require.NoError(t, err)
	require.NotNil(t, h)
	defer func() { _ = h.Release() }()

	payload := []byte(`{"chat":{"kind":"group","id":"g1"},"cursor":"c1","limit":50}`)
	r1, err := db.Call(ctx, "n", cluster.KindHistory, payload, cluster.RequestOptions{Pending: time.Minute})
	require.NoError(t, err)
	require.Equal(t, cluster.StatusPending, r1.Status)
	r2, err := db.Call(ctx, "n", cluster.KindHistory, payload, cluster.RequestOptions{Pending: time.Minute})
	require.NoError(t, err)
	require.NotEqual(t, r1.ID, r2.ID, "every call is its own request")
	m1, err := db.Call(ctx, "n", cluster.KindMedia, []byte(`{"x":1}`), cluster.RequestOptions{})
	require.NoError(t, err)
	s1, err := db.Request(ctx, "n", channel.Outgoing{Chat: chat, Text: "hi", IdempotencyKey: "k"}, cluster.RequestOptions{})
	require.NoError(t, err)
	_, err = db.Call(ctx, "n", cluster.KindSend, payload, cluster.RequestOptions{})
	require.Error(t, err, "a send is not a call")

	reqs, err := h.Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, reqs, 4)
	require.Equal(t, cluster.Request{ID: r1.ID, Kind: cluster.KindHistory, Payload: payload}, reqs[0])
	require.Equal(t, cluster.KindHistory, reqs[1].Kind)
	require.Equal(t, cluster.KindMedia, reqs[2].Kind)
	require.JSONEq(t, `{"x":1}`, string(reqs[2].Payload))
	require.Equal(t, cluster.KindSend, reqs[3].Kind)
	require.Equal(t, "hi", reqs[3].Out.Text)
	require.Nil(t, reqs[3].Payload)

	answer := []byte(`{"next":"c2","events":[]}`)
	ok, err := h.Finish(ctx, r1.ID, cluster.Result{Status: cluster.StatusDone, Answer: answer})
	require.NoError(t, err)
	require.True(t, ok)
	res, err := db.Result(ctx, r1.ID)
	require.NoError(t, err)
	require.Equal(t, cluster.Result{ID: r1.ID, Status: cluster.StatusDone, Answer: answer}, res)

	body := []byte{0, 1, 2, 0xff, 'x', 0}
	ok, err = h.Finish(ctx, m1.ID, cluster.Result{Status: cluster.StatusDone, Answer: []byte(`{"has_body":true}`), Body: body})
	require.NoError(t, err)
	require.True(t, ok)
	res, err = db.Result(ctx, m1.ID)
	require.NoError(t, err)
	require.Equal(t, body, res.Body, "the bytes as they were")
	require.JSONEq(t, `{"has_body":true}`, string(res.Answer))

	ok, err = h.Finish(ctx, r2.ID, cluster.Result{Status: cluster.StatusFailed, Error: cluster.RecordError(channel.ErrKicked)})
	require.NoError(t, err)
	require.True(t, ok)
	res, err = db.Result(ctx, r2.ID)
	require.NoError(t, err)
	require.Equal(t, cluster.StatusFailed, res.Status)
	require.ErrorIs(t, res.Error.Err(), channel.ErrKicked)
	require.Nil(t, res.Answer)

	rc := channel.Receipt{MessageIDs: []string{"m10"}, Time: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	ok, err = h.Finish(ctx, s1.ID, cluster.Result{Status: cluster.StatusDone, Receipt: rc, Answer: answer})
	require.NoError(t, err)
	require.True(t, ok)
	res, err = db.Result(ctx, s1.ID)
	require.NoError(t, err)
	require.Equal(t, cluster.Result{ID: s1.ID, Status: cluster.StatusDone, Receipt: rc}, res, "a send keeps no answer")

	// A call past its pending limit is cancelled, not claimed.
	e1, err := db.Call(ctx, "n", cluster.KindTyping, []byte(`{}`), cluster.RequestOptions{Pending: time.Minute})
	require.NoError(t, err)
	clk.Advance(2 * time.Minute)
	reqs, err = h.Claim(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, reqs)
	res, err = db.Result(ctx, e1.ID)
	require.NoError(t, err)
	require.Equal(t, cluster.StatusCancelled, res.Status)

	// Finished calls go after ReadKeep, sends after the age given.
	require.NoError(t, h.Prune(ctx, time.Hour))
	for _, id := range []int64{r1.ID, r2.ID, m1.ID} {
		_, err = db.Result(ctx, id)
		require.ErrorIs(t, err, cluster.ErrUnknownRequest)
	}
	_, err = db.Result(ctx, e1.ID)
	require.NoError(t, err, "finished less than ReadKeep ago")
	_, err = db.Result(ctx, s1.ID)
	require.NoError(t, err, "a send is kept for the age given")
	clk.Advance(cluster.ReadKeep + time.Second)
	require.NoError(t, h.Prune(ctx, time.Hour))
	_, err = db.Result(ctx, e1.ID)
	require.ErrorIs(t, err, cluster.ErrUnknownRequest)
	_, err = db.Result(ctx, s1.ID)
	require.NoError(t, err)
	clk.Advance(time.Hour)
	require.NoError(t, h.Prune(ctx, time.Hour))
	_, err = db.Result(ctx, s1.ID)
	require.ErrorIs(t, err, cluster.ErrUnknownRequest)
}
