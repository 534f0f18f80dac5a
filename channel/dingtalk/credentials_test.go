package dingtalk_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
	"github.com/personakit/persona/clock"
)

const qpsLimit = "Forbidden.AccessDenied.QpsLimitForApi"

// TestThrottledOpenIsRetried: a connections/open over its rate (403
// Forbidden.AccessDenied.QpsLimit…) is retried after at least a second,
// never taken for refused credentials.
func TestThrottledOpenIsRetried(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	srv := newFake(t, dingtalktest.Config{})
	srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpOpen, Status: 403, Code: qpsLimit, Message: "qps"})
	srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpOpen, Status: 403, Code: "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *dingtalk.Config) { c.Clock, c.Logger = clk, log })
	sink := newRecSink()
	stop := run(t, ch, sink)
	for i := range 2 {
		recs := waitLog(t, buf, "dingtalk_reconnect_scheduled", i+1)
		d := logDelay(t, recs[i])
		require.Equal(t, time.Second, d, "a QPS limit waits its second")
		clk.Advance(d)
	}
	sink.waitState(t, "connected", 0, isUp)
	require.NotContains(t, buf.String(), "dingtalk_unauthorized")
	require.NoError(t, stop())
}

// TestOpenRefusalsEndRun: 400, 401 and 403 that are not rate limits are
// refused credentials and end Run with ErrUnauthorized (also offline).
func TestOpenRefusalsEndRun(t *testing.T) {
	t.Parallel()
	for _, f := range []dingtalktest.Failure{
		{Op: dingtalktest.OpOpen, Status: 400, Code: "invalidClientIdOrSecret"},
		{Op: dingtalktest.OpOpen, Status: 401, Code: "Unauthenticated"},
		{Op: dingtalktest.OpOpen, Status: 403, Code: "Forbidden.AccessDenied.IpNotInWhiteList"},
	} {
		srv := newFake(t, dingtalktest.Config{})
		srv.FailNext(f)
		ch := newChannel(t, srv, nil)
		err := ch.Run(tctx(t), newRecSink())
		require.ErrorIs(t, err, dingtalk.ErrUnauthorized, "HTTP %d", f.Status)
		require.ErrorIs(t, err, channel.ErrOffline)
		require.Equal(t, channel.ClassOffline, channel.Classify(err), "%v", err)
		var ae *dingtalk.APIError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, f.Status, ae.Status)
	}
}

// TestTokenEndpointFailures: a throttled token call is a rate limit (the
// next call works); refused credentials are ErrUnauthorized and
// channel.ErrOffline for Send, never a rejection, and not
// ErrMediaUnavailable for FetchMedia.
func TestTokenEndpointFailures(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	send := func() error {
		_, err := r.ch.Send(ctx, channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: groupID}, Text: "x"})
		return err
	}

	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpToken, Status: 403, Code: qpsLimit})
	err := send()
	require.Equal(t, channel.ClassRateLimited, channel.Classify(err), "%v", err)
	require.NotErrorIs(t, err, dingtalk.ErrUnauthorized)
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpToken, Status: 429, RetryAfter: 3})
	err = send()
	require.Equal(t, channel.ClassRateLimited, channel.Classify(err), "%v", err)
	require.NotErrorIs(t, err, dingtalk.ErrUnauthorized)

	for _, f := range []dingtalktest.Failure{
		{Op: dingtalktest.OpToken, Status: 400, Code: "invalidClientIdOrSecret"},
		{Op: dingtalktest.OpToken, Status: 403, Code: "Forbidden.AccessDenied.AppNotAuthorized"},
		{Op: dingtalktest.OpToken, Status: 401, Code: "Unauthenticated"},
	} {
		r.srv.FailNext(f)
		err = send()
		require.ErrorIs(t, err, dingtalk.ErrUnauthorized, "HTTP %d", f.Status)
		require.ErrorIs(t, err, channel.ErrOffline)
		require.NotErrorIs(t, err, channel.ErrRejected)
		require.Equal(t, channel.ClassOffline, channel.Classify(err), "%v", err)
		var ae *dingtalk.APIError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, f.Status, ae.Status)

		r.srv.FailNext(f)
		_, err = r.ch.FetchMedia(ctx, dmAlice, channel.Media{FileID: "dc-x"}, channel.MediaRequest{})
		require.ErrorIs(t, err, dingtalk.ErrUnauthorized, "HTTP %d", f.Status)
		require.NotErrorIs(t, err, channel.ErrMediaUnavailable, "bad credentials are not a missing file")
	}
	require.NoError(t, send(), "a token is fetched once the endpoint answers")
}
