package dingtalk

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

// ctxSink records whether HandleEvent was called with a dead context.
type ctxSink struct {
	mu   sync.Mutex
	dead int
	got  []string
}

func (s *ctxSink) HandleEvent(ctx context.Context, ev channel.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil {
		s.dead++
		return ctx.Err()
	}
	s.got = append(s.got, ev.MessageID)
	return nil
}

func (s *ctxSink) ReportState(context.Context, channel.State) {}

// TestDeliverLoopStopsBeforeTakingAnItem: with ctx ended and messages
// queued, deliverLoop never hands one to the sink with the dead context
// (a select with both ready would pick at random); flush then offers them
// all, in order, with a live one.
func TestDeliverLoopStopsBeforeTakingAnItem(t *testing.T) {
	t.Parallel()
	c, err := New(Config{ClientID: "dingabc", ClientSecret: "s3cr3t-value"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 200 {
		sink := &ctxSink{}
		r := &runner{c: c, sink: sink, items: make(chan item, 4)}
		for _, id := range []string{"m1", "m2", "m3"} {
			r.items <- item{ev: channel.Event{MessageID: id}}
		}
		pending := r.deliverLoop(ctx)
		require.Zero(t, sink.dead, "HandleEvent with a dead context")
		r.flush(ctx, pending)
		require.Equal(t, []string{"m1", "m2", "m3"}, sink.got)
	}
}

func TestFlushOffersPendingFirst(t *testing.T) {
	t.Parallel()
	c, err := New(Config{ClientID: "dingabc", ClientSecret: "s3cr3t-value"})
	require.NoError(t, err)
	sink := &ctxSink{}
	r := &runner{c: c, sink: sink, items: make(chan item, 4)}
	r.items <- item{ev: channel.Event{MessageID: "m2"}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.flush(ctx, &item{ev: channel.Event{MessageID: "m1"}, offers: 3})
	require.Equal(t, []string{"m1", "m2"}, sink.got)
	require.Zero(t, sink.dead)
}

// TestErrcodeBusyIsTransient: errcode -1 (system busy) in a 2xx answer
// is retried, not a definitive rejection.
func TestErrcodeBusyIsTransient(t *testing.T) {
	t.Parallel()
	e := classify("sessionWebhook", 200, nil, []byte(`{"errcode":-1,"errmsg":"系统繁忙"}`), 0)
	require.Equal(t, channel.ClassTransient, channel.Classify(e), "%v", e)
	require.Equal(t, "-1", e.Code)
	e = classify("sessionWebhook", 200, nil, []byte(`{"errcode":-2,"errmsg":"x"}`), 0)
	require.Equal(t, channel.ClassRejected, channel.Classify(e), "other errcodes stay definitive")
}

// TestCredentialsRefused: only 401 and 400/403 without a rate limit are
// bad credentials.
func TestCredentialsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		body   string
		want   bool
	}{
		{401, `{"code":"Unauthenticated"}`, true},
		{400, `{"code":"invalidClientIdOrSecret"}`, true},
		{403, `{"code":"Forbidden.AccessDenied.IpNotInWhiteList"}`, true},
		{403, `{"code":"Forbidden.AccessDenied.QpsLimitForApi"}`, false},
		{403, `{"code":"Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"}`, false},
		{400, `{"status":1111,"wait":5}`, false},
		{429, `{}`, false},
		{404, `{}`, false},
		{500, `{}`, false},
	} {
		e := classify("gateway/connections/open", tc.status, nil, []byte(tc.body), 0)
		require.Equal(t, tc.want, credentialsRefused(e), "%d %s", tc.status, tc.body)
	}
	require.False(t, credentialsRefused(errors.New("network")))
	ae := &authError{err: classify("oauth2/accessToken", 400, nil, []byte(`{"code":"x"}`), 0)}
	require.ErrorIs(t, ae, ErrUnauthorized)
	require.Equal(t, channel.ClassOffline, channel.Classify(ae))
	require.True(t, strings.HasPrefix(ae.Error(), ErrUnauthorized.Error()))
}

// TestSecretSetKeepsCurrentToken: the cap never pushes out the client
// secret or the access token in use; a replaced token joins the rolling
// list.
func TestSecretSetKeepsCurrentToken(t *testing.T) {
	t.Parallel()
	var s secretSet
	s.pin("the-client-secret")
	s.setCurrent("token-one-abcdef")
	s.setCurrent("token-two-abcdef")
	require.Equal(t, "<redacted> <redacted>", s.scrub("token-one-abcdef token-two-abcdef"))
	for i := range 3 * maxSecrets {
		s.add("webhook-session-" + itoa(i))
	}
	require.Len(t, s.list, maxSecrets)
	require.Equal(t, "a <redacted> b <redacted> c", s.scrub("a the-client-secret b token-two-abcdef c"))
	require.Equal(t, "token-one-abcdef", s.scrub("token-one-abcdef"), "an old token leaves with the cap")
	require.Equal(t, "<redacted>", s.scrub("webhook-session-"+itoa(3*maxSecrets-1)))
}
