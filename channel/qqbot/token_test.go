package qqbot_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
	"github.com/personakit/persona/clock"
)

// One token serves every call, concurrent ones included, until shortly
// before it expires; then the next call gets a new one (the old one is
// still valid at the platform for its last 60 s).
func TestTokenCachedSharedAndRefreshedBeforeExpiry(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	srv := newFake(t, qqbottest.Config{Clock: clk, AllowActive: true})
	ch := newChannel(t, srv, func(c *qqbot.Config) { c.Clock = clk; c.ActiveMessages = true })
	ctx := tctx(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := ch.Send(ctx, channel.Outgoing{Chat: group, Text: "hi"})
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.Equal(t, 1, srv.TokenCalls(), "one token for eight concurrent sends")
	first := srv.CurrentToken()

	clk.Advance(7200*time.Second - 51*time.Second)
	_, err := ch.Send(ctx, channel.Outgoing{Chat: group, Text: "still the first token"})
	require.NoError(t, err)
	require.Equal(t, 1, srv.TokenCalls())

	clk.Advance(2 * time.Second) // 49 s left: inside the refresh margin
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "a new token"})
	require.NoError(t, err)
	require.Equal(t, 2, srv.TokenCalls())
	require.NotEqual(t, first, srv.CurrentToken())
	calls := srv.Calls()
	require.Equal(t, "QQBot "+srv.CurrentToken(), calls[len(calls)-1].Auth)
	require.Equal(t, "QQBot "+first, calls[len(calls)-2].Auth)
}

func TestBadCredentialsEndRun(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	log, buf := newLogger()
	for _, mode := range []qqbot.Mode{qqbot.ModeGateway, qqbot.ModeWebhook} {
		ch := newChannel(t, srv, func(c *qqbot.Config) { c.Secret = "wrong-secret-value"; c.Mode = mode; c.Logger = log })
		err := ch.Run(tctx(t), newRecSink())
		require.ErrorIs(t, err, qqbot.ErrUnauthorized, "%s", mode)
		require.NotContains(t, err.Error(), "wrong-secret-value")
	}
	require.NotContains(t, buf.String(), "wrong-secret-value")
}

// The secret and every access token stay out of logs and errors, through
// a run with drops, refused tokens, failed sends and a stop.
func TestCredentialsNeverLoggedOrInErrors(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *qqbot.Config) { c.Logger = log })
	sink := newRecSink()
	stop := run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	_, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "hi"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)

	var tokens []string
	var errs []error
	tokens = append(tokens, srv.CurrentToken())
	srv.RevokeTokens()
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "after a revoke"})
	require.NoError(t, err)
	tokens = append(tokens, srv.CurrentToken())
	for _, f := range []qqbottest.Failure{{Status: 500}, {Drop: true}, {Status: 401, Code: 11244}, {Status: 400, Code: 11253}} {
		srv.FailNextSend(f)
		_, err := ch.Send(ctx, channel.Outgoing{Chat: group, Text: "failing"})
		errs = append(errs, err)
		tokens = append(tokens, srv.CurrentToken())
	}
	srv.DropConnection(4004, "authentication failed")
	require.NoError(t, srv.Wait(ctx, func() bool { return len(srv.Identifies())+len(srv.Resumes()) >= 2 }))
	sink.waitOnline(t, true)
	require.NoError(t, srv.SetOffline(ctx, true))
	sink.waitOnline(t, false)
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "offline"})
	errs = append(errs, err)
	require.NoError(t, srv.SetOffline(ctx, false))
	sink.waitOnline(t, true)
	tokens = append(tokens, srv.CurrentToken())
	require.NoError(t, stop())

	logs := buf.String()
	require.NotEmpty(t, logs)
	for _, s := range append(tokens, srv.Secret()) {
		if s == "" {
			continue
		}
		require.NotContains(t, logs, s)
		for _, e := range errs {
			if e != nil {
				require.NotContains(t, e.Error(), s)
			}
		}
	}
	require.True(t, strings.Contains(logs, "qq_state"))
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := qqbot.New(qqbot.Config{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "AppID is required")
	require.Contains(t, err.Error(), "Secret is required")
	_, err = qqbot.New(qqbot.Config{AppID: "1:2", Secret: "sec ret", Mode: "poll", APIBase: "ftp://x", RetryMin: time.Minute, RetryMax: time.Second, MaxReplies: -1})
	require.Error(t, err)
	for _, want := range []string{"AppID", "white space", "Mode", "APIBase", "RetryMax", "MaxReplies"} {
		require.Contains(t, err.Error(), want)
	}
	require.NotContains(t, err.Error(), "sec ret")
	ch, err := qqbot.New(qqbot.Config{AppID: "102000001", Secret: "s"})
	require.NoError(t, err)
	require.Equal(t, "qq", ch.Name())
	require.Equal(t, "102000001", ch.BotID())
	require.Error(t, ch.Run(t.Context(), nil), "a nil sink")
}

func TestRunOnlyOnce(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, _ := started(t, srv, nil)
	require.True(t, errors.Is(ch.Run(t.Context(), newRecSink()), qqbot.ErrRunning))
}
