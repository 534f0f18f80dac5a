package dingtalk_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
)

// TestSecretsNeverLeak runs the adapter through connections, reconnects,
// token fetches and refreshes, webhook and API sends and their failures
// (including platform answers and transport errors that repeat a
// secret), with debug logging, and requires that the client secret,
// every access token, every connection ticket and every session webhook
// URL stay out of the log and of every error.
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	secret := r.srv.ClientSecret()
	var errs []string
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}

	p, _ := r.converse(t, true, "hi")
	webhook := p.Webhook
	session := webhook[strings.Index(webhook, "session=")+len("session="):]

	// Webhook sends: success, an answer that repeats the session, a lost
	// answer (the transport error names the URL).
	_, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "ok"})
	require.NoError(t, err)
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpWebhook, ErrCode: 310000, ErrMsg: "bad session " + session})
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "x"})
	require.Error(t, err)
	keep(err)
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpWebhook, Drop: true})
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "x"})
	require.Error(t, err)
	keep(err)

	// API sends with a token, a revoked token, an answer repeating the
	// token.
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "api"})
	require.NoError(t, err)
	tokens := r.srv.Tokens()
	require.NotEmpty(t, tokens)
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpOTO, Status: 400, Code: "bad", Message: "token " + tokens[0] + " is odd"})
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "x"})
	require.Error(t, err)
	keep(err)
	r.srv.RevokeTokens()
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "after revoke"})
	require.NoError(t, err)

	// A token answer that echoes the secret.
	fresh := newChannel(t, r.srv, func(c *dingtalk.Config) { c.Logger = r.chLogger() })
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpToken, Status: 400, Code: "invalid", Message: "appSecret " + secret + " rejected"})
	_, err = fresh.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "x"})
	require.ErrorIs(t, err, dingtalk.ErrUnauthorized)
	keep(err)

	// Reconnects with new tickets, one of them to an endpoint that is not
	// there (the dial error names the URL with the ticket).
	n := len(r.sink.States())
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpOpen, Status: 200, Body: `{"endpoint":"ws://127.0.0.1:1/connect","ticket":"tk-secret-0123456789"}`})
	r.srv.Drop()
	n = r.sink.waitState(t, "down", n, isDown)
	r.sink.waitState(t, "up again", n, isUp)
	waitLog(t, r.logs, "dingtalk_connect_failed", 1)

	all := r.logs.String() + "\n" + strings.Join(errs, "\n")
	for _, st := range r.sink.States() {
		all += "\n" + st.Reason
	}
	secrets := []string{secret, session, webhook, "tk-secret-0123456789"}
	secrets = append(secrets, r.srv.Tokens()...)
	for _, o := range r.srv.Opens() {
		secrets = append(secrets, o.Ticket)
	}
	noSecrets(t, all, secrets...)
	require.Contains(t, all, "<redacted>", "the redaction was exercised")
}
