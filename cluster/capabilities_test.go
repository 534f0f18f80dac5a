package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/cluster"
	"github.com/personakit/persona/internal/pgtest"
)

// The test channel's other capabilities. Like Send and FetchHistory they
// work only through the platform's connection (a channel that is not
// connected is offline), record what they did on the platform, and fail
// on purpose for some arguments.

// act records what the connected channel c did, or says it is offline.
func (c *testChannel) act(what string) error {
	c.pl.mu.Lock()
	defer c.pl.mu.Unlock()
	if c.pl.current != c.id {
		return fmt.Errorf("test: %s is not connected: %w", c.id, channel.ErrOffline)
	}
	c.pl.actions = append(c.pl.actions, c.id+": "+what)
	return nil
}

// actions returns what the channels did.
func (p *platform) did() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.actions...)
}

func (p *platform) bodiesClosed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

var testChats = []channel.Chat{{Kind: channel.Group, ID: "g1"}, {Kind: channel.Group, ID: "g2"}, {Kind: channel.Private, ID: "u3"}}

func (c *testChannel) ListChats(context.Context) ([]channel.Chat, error) {
	if err := c.act("list chats"); err != nil {
		return nil, err
	}
	return append([]channel.Chat(nil), testChats...), nil
}

func (c *testChannel) LookupMember(_ context.Context, chat channel.Chat, userID string) (channel.Member, error) {
	if userID == "ghost" {
		return channel.Member{}, fmt.Errorf("test: %w", &channel.RejectedError{Code: "404", Reason: "no such member"})
	}
	if err := c.act("lookup " + chat.ID + "/" + userID); err != nil {
		return channel.Member{}, err
	}
	m := channel.Member{UserID: userID, Name: "User " + userID, Role: channel.RoleMember, Level: 7, LevelKnown: true}
	if userID == "boss" {
		m.Role = channel.RoleOwner
	}
	return m, nil
}

// mediaBody is a media body that counts its Close on the platform.
type mediaBody struct {
	io.Reader
	pl *platform
}

func (b mediaBody) Close() error {
	b.pl.mu.Lock()
	b.pl.closed++
	b.pl.mu.Unlock()
	return nil
}

// mediaBytes is the content of the test file id.
func mediaBytes(id string) []byte {
	if size, ok := strings.CutPrefix(id, "big-"); ok {
		n, _ := strconv.Atoi(size)
		return bytes.Repeat([]byte{0xab}, n)
	}
	return []byte("\x00\xffbinary content of " + id + "\x00")
}

// FetchMedia: file id "gone" is unavailable, "huge" declares a size of a
// terabyte, "cdn" is at a URL, "big-N" is N bytes of unknown size, any
// other is a small binary body.
func (c *testChannel) FetchMedia(_ context.Context, chat channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	if m.FileID == "gone" {
		return channel.MediaContent{}, fmt.Errorf("test: expired: %w", channel.ErrMediaUnavailable)
	}
	if err := c.act(fmt.Sprintf("media %s/%s %s %s", chat.ID, m.FileID, req.Type, req.Format)); err != nil {
		return channel.MediaContent{}, err
	}
	switch {
	case m.FileID == "cdn":
		return channel.MediaContent{URL: "https://cdn.example.com/" + m.FileID, MIME: "image/jpeg", Size: 1234}, nil
	case m.FileID == "huge":
		return channel.MediaContent{Body: mediaBody{strings.NewReader("tiny"), c.pl}, MIME: "video/mp4", Size: 1 << 40}, nil
	case strings.HasPrefix(m.FileID, "big-"):
		return channel.MediaContent{Body: mediaBody{bytes.NewReader(mediaBytes(m.FileID)), c.pl}, MIME: "application/octet-stream"}, nil
	}
	b := mediaBytes(m.FileID)
	return channel.MediaContent{Body: mediaBody{bytes.NewReader(b), c.pl}, MIME: "image/png", Size: int64(len(b))}, nil
}

func (c *testChannel) Typing(_ context.Context, chat channel.Chat) error {
	if chat.ID == "muted" {
		return &channel.MutedError{Until: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}
	}
	return c.act("typing " + chat.ID)
}

func (c *testChannel) Recall(_ context.Context, chat channel.Chat, messageID string) error {
	if messageID == "too-old" {
		return fmt.Errorf("test: %w", &channel.RejectedError{Code: "recall", Reason: "too old to recall"})
	}
	return c.act("recall " + chat.ID + "/" + messageID)
}

func (c *testChannel) AnswerFriendRequest(_ context.Context, n channel.Notice, accept bool) error {
	if n.Flag == "" {
		return errors.New("test: the request has no flag")
	}
	return c.act(fmt.Sprintf("answer %s %t %s", n.Flag, accept, n.Comment))
}

// SendForward delivers a card as a message whose text joins the nodes.
func (c *testChannel) SendForward(_ context.Context, chat channel.Chat, nodes []channel.ForwardNode) (channel.Receipt, error) {
	if chat.ID == "blocked" {
		return channel.Receipt{}, fmt.Errorf("test: %w", &channel.RejectedError{Code: "card", Reason: "cards not allowed"})
	}
	var parts []string
	for _, n := range nodes {
		parts = append(parts, n.Name+"("+n.UserID+"): "+n.Text)
	}
	c.pl.mu.Lock()
	defer c.pl.mu.Unlock()
	if c.pl.current != c.id {
		return channel.Receipt{}, fmt.Errorf("test: %s is not connected: %w", c.id, channel.ErrOffline)
	}
	d := c.pl.appendLocked(delivery{by: c.id, out: channel.Outgoing{Chat: chat, Text: "card: " + strings.Join(parts, " | ")}})
	return channel.Receipt{MessageIDs: []string{d.id}, Time: d.at}, nil
}

// capabilitiesOf finds every capability a Share forwards, failing the
// test when one is missing.
type capabilities struct {
	channel.HistoryFetcher
	channel.ChatLister
	channel.MemberLookup
	channel.MediaFetcher
	channel.Typer
	channel.Recaller
	channel.RequestResponder
	channel.ForwardSender
}

func capabilitiesOf(t *testing.T, ch channel.Channel) capabilities {
	t.Helper()
	var c capabilities
	var ok [8]bool
	c.HistoryFetcher, ok[0] = channel.As[channel.HistoryFetcher](ch)
	c.ChatLister, ok[1] = channel.As[channel.ChatLister](ch)
	c.MemberLookup, ok[2] = channel.As[channel.MemberLookup](ch)
	c.MediaFetcher, ok[3] = channel.As[channel.MediaFetcher](ch)
	c.Typer, ok[4] = channel.As[channel.Typer](ch)
	c.Recaller, ok[5] = channel.As[channel.Recaller](ch)
	c.RequestResponder, ok[6] = channel.As[channel.RequestResponder](ch)
	c.ForwardSender, ok[7] = channel.As[channel.ForwardSender](ch)
	require.Equal(t, [8]bool{true, true, true, true, true, true, true, true}, ok, "every capability is found")
	return c
}

// readMedia reads and closes a media content's body.
func readMedia(t *testing.T, mc channel.MediaContent) []byte {
	t.Helper()
	require.NotNil(t, mc.Body)
	b, err := io.ReadAll(mc.Body)
	require.NoError(t, err)
	require.NoError(t, mc.Body.Close())
	return b
}

// sharedPair starts a holder a and a follower f that is told the holder
// is online.
func sharedPair(t *testing.T) (pl *platform, a, f *proc) {
	t.Helper()
	url := pgtest.Schema(t)
	pl = newPlatform()
	a = newProc(t, url, "a", pl, true, cluster.Options{})
	waitHolder(t, pl, a)
	waitOnline(t, a)
	f = newProc(t, url, "f", pl, false, cluster.Options{})
	waitPublished(t, f.db, "bot/test#0")
	return pl, a, f
}

// A follower's every capability goes through the holder and returns what
// the holder's own channel returns.
func TestShareRelaysEveryCapability(t *testing.T) {
	pl, a, f := sharedPair(t)
	ctx := t.Context()
	relayed, direct := capabilitiesOf(t, f.sh), capabilitiesOf(t, a.sh)

	// f's own channel is not connected: only the holder can act.
	require.ErrorIs(t, f.ch.Typing(ctx, chat), channel.ErrOffline)

	chats, err := relayed.ListChats(ctx)
	require.NoError(t, err)
	want, err := direct.ListChats(ctx)
	require.NoError(t, err)
	require.Equal(t, want, chats)
	require.Equal(t, testChats, chats)

	for _, user := range []string{"u1", "boss"} {
		m, err := relayed.LookupMember(ctx, chat, user)
		require.NoError(t, err)
		wantM, err := direct.LookupMember(ctx, chat, user)
		require.NoError(t, err)
		require.Equal(t, wantM, m)
	}

	req := channel.MediaRequest{Type: channel.SegVoice, Format: "mp3", MaxBytes: 1 << 20}
	mc, err := relayed.FetchMedia(ctx, chat, channel.Media{FileID: "f1"}, req)
	require.NoError(t, err)
	wantMC, err := direct.FetchMedia(ctx, chat, channel.Media{FileID: "f1"}, req)
	require.NoError(t, err)
	body := readMedia(t, mc)
	require.Equal(t, readMedia(t, wantMC), body, "the same bytes")
	require.Equal(t, mediaBytes("f1"), body)
	require.Equal(t, wantMC.MIME, mc.MIME)
	require.Equal(t, wantMC.Size, mc.Size)
	require.Empty(t, mc.URL)

	require.NoError(t, relayed.Typing(ctx, chat))
	require.NoError(t, relayed.Recall(ctx, chat, "m42"))
	require.NoError(t, relayed.AnswerFriendRequest(ctx, channel.Notice{Type: channel.NoticeFriendRequest, UserID: "u7", Flag: "fl-1", Comment: "hi"}, true))
	require.NoError(t, relayed.AnswerFriendRequest(ctx, channel.Notice{Flag: "fl-2"}, false))

	nodes := []channel.ForwardNode{{Name: "Bot", UserID: "b1", Text: "one"}, {Name: "Bot", UserID: "b1", Text: "two"}}
	rc, err := relayed.SendForward(ctx, chat, nodes)
	require.NoError(t, err)
	got := pl.deliveries("card: Bot(b1): one | Bot(b1): two")
	require.Len(t, got, 1)
	require.Equal(t, "a", got[0].by, "the holder sent the card")
	require.Equal(t, []string{got[0].id}, rc.MessageIDs)
	require.True(t, got[0].at.Equal(rc.Time))

	require.Equal(t, []string{
		"a: list chats", "a: list chats",
		"a: lookup g1/u1", "a: lookup g1/u1", "a: lookup g1/boss", "a: lookup g1/boss",
		"a: media g1/f1 voice mp3", "a: media g1/f1 voice mp3",
		"a: typing g1", "a: recall g1/m42", "a: answer fl-1 true hi", "a: answer fl-2 false ",
	}, pl.did(), "everything was done by the holder, once per call")
	require.Equal(t, 2, pl.bodiesClosed(), "the holder closed the body it relayed")
}

// The errors of the holder's capabilities reach the follower with their
// class and fields.
func TestShareRelaysCapabilityErrors(t *testing.T) {
	_, a, f := sharedPair(t)
	ctx := t.Context()
	relayed, direct := capabilitiesOf(t, f.sh), capabilitiesOf(t, a.ch)
	same := func(want, got error) {
		t.Helper()
		require.Error(t, want)
		require.Error(t, got)
		require.Equal(t, channel.Classify(want), channel.Classify(got))
		require.Contains(t, got.Error(), want.Error())
		var re *cluster.RemoteError
		require.ErrorAs(t, got, &re, "the holder's error")
	}

	_, err := relayed.LookupMember(ctx, chat, "ghost")
	var rj *channel.RejectedError
	require.ErrorAs(t, err, &rj)
	require.Equal(t, "404", rj.Code)
	_, want := direct.LookupMember(ctx, chat, "ghost")
	same(want, err)

	_, err = relayed.FetchMedia(ctx, chat, channel.Media{FileID: "gone"}, channel.MediaRequest{})
	require.ErrorIs(t, err, channel.ErrMediaUnavailable)
	_, want = direct.FetchMedia(ctx, chat, channel.Media{FileID: "gone"}, channel.MediaRequest{})
	same(want, err)

	muted := channel.Chat{Kind: channel.Group, ID: "muted"}
	err = relayed.Typing(ctx, muted)
	var mu *channel.MutedError
	require.ErrorAs(t, err, &mu)
	require.True(t, time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC).Equal(mu.Until))
	same(direct.Typing(ctx, muted), err)

	err = relayed.Recall(ctx, chat, "too-old")
	require.ErrorAs(t, err, &rj)
	require.Equal(t, "too old to recall", rj.Reason)
	same(direct.Recall(ctx, chat, "too-old"), err)

	err = relayed.AnswerFriendRequest(ctx, channel.Notice{}, true)
	same(direct.AnswerFriendRequest(ctx, channel.Notice{}, true), err)
	require.Contains(t, err.Error(), "no flag")

	blocked := channel.Chat{Kind: channel.Group, ID: "blocked"}
	_, err = relayed.SendForward(ctx, blocked, []channel.ForwardNode{{Text: "x"}})
	require.ErrorAs(t, err, &rj)
	require.True(t, channel.Classify(err).Definitive())
	_, want = direct.SendForward(ctx, blocked, []channel.ForwardNode{{Text: "x"}})
	same(want, err)
}

// A media body crosses whole up to the caller's limit (32 MiB without
// one); a larger one fails with channel.ErrMediaTooLarge; content at a
// URL crosses as the URL.
func TestShareRelaysMedia(t *testing.T) {
	pl, _, f := sharedPair(t)
	ctx := t.Context()
	mf := capabilitiesOf(t, f.sh).MediaFetcher

	mc, err := mf.FetchMedia(ctx, chat, channel.Media{FileID: "big-5000"}, channel.MediaRequest{Type: channel.SegFile, MaxBytes: 5000})
	require.NoError(t, err)
	require.Equal(t, mediaBytes("big-5000"), readMedia(t, mc), "exactly the limit")
	require.Equal(t, int64(5000), mc.Size, "the size read, when the platform declared none")
	require.Equal(t, "application/octet-stream", mc.MIME)

	_, err = mf.FetchMedia(ctx, chat, channel.Media{FileID: "big-5001"}, channel.MediaRequest{Type: channel.SegFile, MaxBytes: 5000})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge, "one byte more than the limit")

	_, err = mf.FetchMedia(ctx, chat, channel.Media{FileID: "huge"}, channel.MediaRequest{Type: channel.SegVideo})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge, "declared larger than the default limit")
	require.Contains(t, err.Error(), fmt.Sprint(cluster.DefaultMaxMedia))

	mc, err = mf.FetchMedia(ctx, chat, channel.Media{FileID: "big-0"}, channel.MediaRequest{Type: channel.SegFile})
	require.NoError(t, err)
	require.Empty(t, readMedia(t, mc), "an empty body is still a body")

	mc, err = mf.FetchMedia(ctx, chat, channel.Media{FileID: "cdn"}, channel.MediaRequest{Type: channel.SegImage})
	require.NoError(t, err)
	require.Equal(t, channel.MediaContent{URL: "https://cdn.example.com/cdn", MIME: "image/jpeg", Size: 1234}, mc)

	require.Equal(t, 4, pl.bodiesClosed(), "every body the holder opened was closed")
}

// bareChannel has none of the optional capabilities.
type bareChannel = historyless

// typingOnly can show typing and nothing else.
type typingOnly struct {
	channel.Channel
	channel.Typer
}

// The Share forwards a capability only when the channel it wraps has it;
// called anyway (a type assertion instead of channel.As), it fails.
func TestShareExposesOnlyTheChannelsCapabilities(t *testing.T) {
	t.Parallel()
	var st cluster.Store = nopStore{}
	tc := newTestChannel("a", newPlatform())
	none := func(t *testing.T, sh channel.Channel, except string) {
		t.Helper()
		found := map[string]bool{}
		_, found["history"] = channel.As[channel.HistoryFetcher](sh)
		_, found["chats"] = channel.As[channel.ChatLister](sh)
		_, found["member"] = channel.As[channel.MemberLookup](sh)
		_, found["media"] = channel.As[channel.MediaFetcher](sh)
		_, found["typing"] = channel.As[channel.Typer](sh)
		_, found["recall"] = channel.As[channel.Recaller](sh)
		_, found["answer"] = channel.As[channel.RequestResponder](sh)
		_, found["forward"] = channel.As[channel.ForwardSender](sh)
		for name, ok := range found {
			require.Equal(t, name == except, ok, name)
		}
	}

	bare := cluster.Share(bareChannel{tc}, st, cluster.Options{})
	none(t, bare, "")
	ty, ok := bare.(channel.Typer)
	require.True(t, ok, "a forwarder has every method")
	err := ty.Typing(t.Context(), chat)
	require.ErrorIs(t, err, errors.ErrUnsupported, "but the channel cannot")
	_, err = bare.(channel.MediaFetcher).FetchMedia(t.Context(), chat, channel.Media{}, channel.MediaRequest{})
	require.ErrorIs(t, err, errors.ErrUnsupported)

	typing := cluster.Share(typingOnly{bareChannel{tc}, tc}, st, cluster.Options{})
	none(t, typing, "typing")
	got, _ := channel.As[channel.Typer](typing)
	require.Equal(t, typing, got, "the Share answers")

	all := cluster.Share(tc, st, cluster.Options{})
	c := capabilitiesOf(t, all)
	require.Equal(t, all, c.ForwardSender, "the Share answers, not the adapter")
	require.Equal(t, all, c.MediaFetcher)
}

// Without a holder, or with one that is not online, every capability of
// a follower fails at once with channel.ErrOffline and asks nothing.
func TestShareCapabilitiesFailFastWithoutAnOnlineHolder(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	const name = "bot/test#0"
	f := newProc(t, url, "f", pl, false, cluster.Options{Name: name})
	c := capabilitiesOf(t, f.sh)
	ctx := t.Context()
	calls := map[string]func() error{
		"chats":  func() error { _, err := c.ListChats(ctx); return err },
		"member": func() error { _, err := c.LookupMember(ctx, chat, "u1"); return err },
		"media": func() error {
			_, err := c.FetchMedia(ctx, chat, channel.Media{FileID: "f1"}, channel.MediaRequest{})
			return err
		},
		"typing":  func() error { return c.Typing(ctx, chat) },
		"recall":  func() error { return c.Recall(ctx, chat, "m1") },
		"answer":  func() error { return c.AnswerFriendRequest(ctx, channel.Notice{Flag: "x"}, true) },
		"forward": func() error { _, err := c.SendForward(ctx, chat, []channel.ForwardNode{{Text: "x"}}); return err },
	}
	for what, call := range calls {
		err := call()
		require.ErrorIs(t, err, channel.ErrOffline, what)
		require.Contains(t, err.Error(), "no process holds the connection", what)
	}

	hold := rawHold(t, openDB(t, url, nil), name)
	require.NoError(t, hold.PublishState(ctx, channel.State{Platform: "test", Connected: true, Reason: "logging in"}))
	for what, call := range calls {
		err := call()
		require.ErrorIs(t, err, channel.ErrOffline, what)
		require.Contains(t, err.Error(), "logging in", what)
	}
	claimed, err := hold.Claim(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, claimed, "nothing was asked")
	require.Empty(t, pl.did())
}

// A forward card the holder had taken when it died may have been sent:
// its follower gets channel.ErrUnconfirmed, as for a send (the delivery
// ledger keeps its intent). A recall too; a read (a member lookup, a
// media fetch) fails with channel.ErrOffline instead, and may be asked
// again.
func TestShareCallsOfADeadHolder(t *testing.T) {
	url := pgtest.Schema(t)
	pl := newPlatform()
	const name = "bot/test#0"
	dead := openDB(t, url, nil)
	hold := rawHold(t, dead, name)
	f := newProc(t, url, "f", pl, false, cluster.Options{Name: name})
	c := capabilitiesOf(t, f.sh)
	ctx := t.Context()

	nodes := []channel.ForwardNode{{Name: "Bot", UserID: "b1", Text: "summary"}}
	calls := []struct {
		kind cluster.RequestKind
		call func() error
		want error
	}{
		{cluster.KindForward, func() error { _, err := c.SendForward(ctx, chat, nodes); return err }, channel.ErrUnconfirmed},
		{cluster.KindRecall, func() error { return c.Recall(ctx, chat, "m9") }, channel.ErrUnconfirmed},
		{cluster.KindMember, func() error { _, err := c.LookupMember(ctx, chat, "u1"); return err }, channel.ErrOffline},
		{cluster.KindMedia, func() error {
			_, err := c.FetchMedia(ctx, chat, channel.Media{FileID: "f1"}, channel.MediaRequest{MaxBytes: 10})
			return err
		}, channel.ErrOffline},
	}
	errs := make(chan error, len(calls))
	for _, cl := range calls {
		go func() { errs <- cl.call() }()
	}
	var claimed []cluster.Request
	require.Eventually(t, func() bool {
		more, err := hold.Claim(ctx, 10)
		require.NoError(t, err)
		claimed = append(claimed, more...)
		return len(claimed) == len(calls)
	}, waitFor, tick)
	byKind := map[cluster.RequestKind]cluster.Request{}
	for _, r := range claimed {
		byKind[r.Kind] = r
	}
	var args struct {
		Chat  channel.Chat          `json:"chat"`
		Nodes []channel.ForwardNode `json:"nodes"`
	}
	require.NoError(t, json.Unmarshal(byKind[cluster.KindForward].Payload, &args))
	require.Equal(t, chat, args.Chat)
	require.Equal(t, nodes, args.Nodes, "the card crosses as it was")
	require.NoError(t, dead.Close()) // the holder dies while serving them

	n := newProc(t, url, "n", pl, true, cluster.Options{Name: name})
	got := map[error]int{}
	for range calls {
		select {
		case err := <-errs:
			switch {
			case errors.Is(err, channel.ErrUnconfirmed):
				require.NotErrorIs(t, err, channel.ErrOffline)
				got[channel.ErrUnconfirmed]++
			case errors.Is(err, channel.ErrOffline):
				got[channel.ErrOffline]++
			default:
				t.Fatalf("unexpected error %v", err)
			}
		case <-time.After(waitFor):
			t.Fatal("a follower was not told")
		}
	}
	require.Equal(t, map[error]int{channel.ErrUnconfirmed: 2, channel.ErrOffline: 2}, got)
	require.Empty(t, pl.deliveries("card: Bot(b1): summary"), "the card is not sent again on its own")

	// The new holder serves them when asked again.
	waitHolder(t, pl, n)
	waitPublished(t, f.db, name)
	rc, err := c.SendForward(ctx, chat, nodes)
	require.NoError(t, err)
	d := pl.deliveries("card: Bot(b1): summary")
	require.Len(t, d, 1)
	require.Equal(t, "n", d[0].by)
	require.Equal(t, []string{d[0].id}, rc.MessageIDs)
	m, err := c.LookupMember(ctx, chat, "u1")
	require.NoError(t, err)
	require.Equal(t, "User u1", m.Name)
}
