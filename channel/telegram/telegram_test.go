package telegram_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
	"github.com/personakit/persona/clock"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	const token = "987654:SECRET-never-shown"
	tests := []struct {
		name string
		cfg  telegram.Config
		want string
	}{
		{"no token", telegram.Config{}, "Token is required"},
		{"token with slash", telegram.Config{Token: "12:ab/cd"}, "Token is malformed"},
		{"token without colon", telegram.Config{Token: "SECRETSECRET"}, "Token is malformed"},
		{"bad api base", telegram.Config{Token: token, APIBase: "ftp://x"}, "APIBase"},
		{"relative api base", telegram.Config{Token: token, APIBase: "/bot"}, "APIBase"},
		{"unknown mode", telegram.Config{Token: token, Mode: "push"}, "Mode"},
		{"negative poll timeout", telegram.Config{Token: token, PollTimeout: -time.Second}, "PollTimeout is negative"},
		{"negative call timeout", telegram.Config{Token: token, CallTimeout: -time.Second}, "CallTimeout is negative"},
		{"retry max below min", telegram.Config{Token: token, RetryMin: time.Minute, RetryMax: time.Second}, "RetryMax"},
		{"negative offline after", telegram.Config{Token: token, OfflineAfter: -1}, "OfflineAfter"},
		{"webhook without secret", telegram.Config{Token: token, Mode: telegram.ModeWebhook}, "SecretToken: required"},
		{"webhook secret charset", telegram.Config{Token: token, Mode: telegram.ModeWebhook,
			Webhook: telegram.WebhookConfig{SecretToken: "has space"}}, "SecretToken: contains a character"},
		{"webhook secret too long", telegram.Config{Token: token, Mode: telegram.ModeWebhook,
			Webhook: telegram.WebhookConfig{SecretToken: strings.Repeat("a", 257)}}, "at most 256"},
		{"webhook url", telegram.Config{Token: token, Mode: telegram.ModeWebhook,
			Webhook: telegram.WebhookConfig{SecretToken: "s", URL: "not a url"}}, "Webhook.URL"},
		{"webhook path", telegram.Config{Token: token, Mode: telegram.ModeWebhook,
			Webhook: telegram.WebhookConfig{SecretToken: "s", Path: "hook"}}, "Webhook.Path"},
		{"webhook max connections", telegram.Config{Token: token, Mode: telegram.ModeWebhook,
			Webhook: telegram.WebhookConfig{SecretToken: "s", MaxConnections: 101}}, "MaxConnections"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := telegram.New(tc.cfg)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "telegram: invalid config")
			require.NotContains(t, err.Error(), "SECRET", "the error leaks the token")
		})
	}

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		ch, err := telegram.New(telegram.Config{Token: token})
		require.NoError(t, err)
		require.Equal(t, "telegram", ch.Name())
		require.Equal(t, channel.TextLimit{Unit: channel.UTF16, Max: 4096}, ch.TextLimit())
		require.Empty(t, ch.BotID(), "BotID before Run")
	})
}

// The end-to-end check: a group @-message arrives, the adapter
// delivers it normalised, and a send with ReplyTo reaches the fake with
// reply_parameters; the user's reply to the bot carries Quoted.FromBot.
func TestEndToEndGroupMention(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	ch := newChannel(t, srv, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	require.Equal(t, srv.BotID(), ch.BotID())
	require.Equal(t, telegramtest.DefaultBotUsername, ch.Username())

	in, err := srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: "👋 what's up?", MentionBot: true})
	require.NoError(t, err)
	ev := sink.waitEvents(t, 1)[0]
	require.NoError(t, ev.Validate())
	require.Equal(t, "telegram", ev.Platform)
	require.Equal(t, srv.BotID(), ev.BotID)
	require.Equal(t, channel.KindMessage, ev.Kind)
	require.Equal(t, channel.Chat{Kind: channel.Group, ID: "-1001234567890"}, ev.Chat)
	require.Equal(t, strconv.FormatInt(in.MessageID, 10), ev.MessageID)
	require.Equal(t, time.Unix(in.Date, 0), ev.Time)
	require.Equal(t, channel.Sender{ID: "4242", Name: "Alice"}, ev.Sender)
	require.True(t, ev.ToMe)
	require.True(t, ev.Mentions(srv.BotID()))
	require.Equal(t, " 👋 what's up?", ev.Text())
	require.Equal(t, channel.SourceLive, ev.Source)
	require.JSONEq(t, string(mustJSON(t, telegramtest.Update{UpdateID: telegramtest.DefaultFirstUpdateID, Message: &in})), string(ev.Raw))
	require.Equal(t, "telegram/"+srv.BotID()+"/group:-1001234567890/"+ev.MessageID, ev.Key())

	rc, err := ch.Send(t.Context(), channel.Outgoing{Chat: ev.Chat, Text: "all good 🙂", ReplyTo: ev.MessageID})
	require.NoError(t, err)
	sent, err := srv.WaitSent(t.Context(), 1)
	require.NoError(t, err)
	require.Equal(t, "sendMessage", sent[0].Method)
	require.Equal(t, "all good 🙂", sent[0].Text)
	require.Equal(t, in.MessageID, sent[0].ReplyTo)
	require.Equal(t, []string{strconv.FormatInt(sent[0].MessageID, 10)}, rc.MessageIDs)
	require.Equal(t, sent[0].Date, rc.Time)
	calls := srv.Calls()
	var params map[string]json.RawMessage
	for _, c := range calls {
		if c.Method == "sendMessage" {
			params = c.Params
		}
	}
	require.JSONEq(t, `{"message_id":`+ev.MessageID+`}`, string(params["reply_parameters"]))
	require.JSONEq(t, `-1001234567890`, string(params["chat_id"]))

	// Alice answers the bot's message: a quote of a bot message.
	_, err = srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: "thanks", ReplyTo: sent[0].MessageID})
	require.NoError(t, err)
	ev2 := sink.waitEvents(t, 2)[1]
	require.Equal(t, rc.MessageIDs[0], ev2.QuoteID())
	require.NotNil(t, ev2.Quoted)
	require.True(t, ev2.Quoted.FromBot)
	require.Equal(t, "all good 🙂", ev2.Quoted.Text)
	require.Equal(t, srv.BotID(), ev2.Quoted.Sender.ID)
	require.True(t, ev2.Quoted.Sender.IsBot)
	require.False(t, ev2.ToMe, "a quote is not a platform mention")
	require.Equal(t, "thanks", ev2.Text())

	// allowed_updates was sent with the long poll.
	require.Equal(t, telegram.DefaultAllowedUpdates, srv.AllowedUpdates())
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestEditedMessageIsNotice(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	ch := newChannel(t, srv, nil)
	sink := newRecSink()
	run(t, ch, sink)
	m, err := srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: "helo"})
	require.NoError(t, err)
	_, err = srv.PushEdit(t.Context(), group.ID, m.MessageID, "hello")
	require.NoError(t, err)
	evs := sink.waitEvents(t, 2)
	ed := evs[1]
	require.NoError(t, ed.Validate())
	require.Equal(t, channel.KindNotice, ed.Kind)
	require.Equal(t, channel.NoticeMessageEdited, ed.Notice.Type)
	require.Equal(t, evs[0].MessageID, ed.Notice.TargetMessageID)
	require.Equal(t, "4242", ed.Notice.Operator)
	require.Equal(t, "hello", ed.Text())
	require.Empty(t, ed.MessageID)
	require.NotEqual(t, evs[0].Key(), ed.Key(), "an edit must not collide with the original's dedupe key")
}

func TestSendErrorsClassified(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	ch := newChannel(t, srv, nil)
	out := channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: "-1001234567890"}, Text: "hi"}

	tests := []struct {
		name       string
		fail       telegramtest.Failure
		class      channel.ErrorClass
		definitive bool
		check      func(t *testing.T, err error)
	}{
		{"429 retry_after", telegramtest.Failure{Code: 429, RetryAfter: 7}, channel.ClassRateLimited, false, func(t *testing.T, err error) {
			var rl *channel.RateLimitedError
			require.ErrorAs(t, err, &rl)
			require.Equal(t, 7*time.Second, rl.RetryAfter)
		}},
		{"400 chat not found", telegramtest.Failure{Code: 400, Description: "Bad Request: chat not found"}, channel.ClassRejected, true, func(t *testing.T, err error) {
			var rej *channel.RejectedError
			require.ErrorAs(t, err, &rej)
			require.Equal(t, "400", rej.Code)
			require.Equal(t, "Bad Request: chat not found", rej.Reason)
		}},
		{"400 message too long", telegramtest.Failure{Code: 400, Description: "Bad Request: message is too long"}, channel.ClassRejected, true, nil},
		{"400 reply target missing", telegramtest.Failure{Code: 400, Description: "Bad Request: message to be replied not found"}, channel.ClassRejected, true, nil},
		{"400 migrated", telegramtest.Failure{Code: 400, Description: "Bad Request: group chat was upgraded to a supergroup chat", MigrateToChatID: -1009}, channel.ClassRejected, true, func(t *testing.T, err error) {
			var ae *telegram.APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, int64(-1009), ae.MigrateToChatID)
		}},
		{"403 blocked", telegramtest.Failure{Code: 403, Description: "Forbidden: bot was blocked by the user"}, channel.ClassKicked, true, func(t *testing.T, err error) {
			require.ErrorIs(t, err, channel.ErrKicked)
			require.ErrorIs(t, err, channel.ErrRejected)
			var rej *channel.RejectedError
			require.ErrorAs(t, err, &rej)
			require.Equal(t, "403", rej.Code)
		}},
		{"403 with an unexpected text", telegramtest.Failure{Code: 403, Description: "Forbidden: something new"}, channel.ClassKicked, true, nil},
		{"500", telegramtest.Failure{Code: 500}, channel.ClassTransient, false, nil},
		{"502 html", telegramtest.Failure{Code: 502, Body: "<html>bad gateway</html>"}, channel.ClassTransient, false, func(t *testing.T, err error) {
			var ae *telegram.APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, 502, ae.Code)
		}},
		{"409", telegramtest.Failure{Code: 409}, channel.ClassTransient, false, nil},
		{"401", telegramtest.Failure{Code: 401}, channel.ClassOffline, false, func(t *testing.T, err error) {
			require.ErrorIs(t, err, telegram.ErrUnauthorized)
		}},
		{"malformed 200 body", telegramtest.Failure{Code: 200, Body: "{not json"}, channel.ClassTransient, false, nil},
	}
	for _, tc := range tests {
		// Sequential: the failures queue on one server.
		srv.FailNextSend(tc.fail)
		_, err := ch.Send(t.Context(), out)
		require.Error(t, err, tc.name)
		require.Equal(t, tc.class, channel.Classify(err), "%s: class of %v", tc.name, err)
		require.Equal(t, tc.definitive, channel.Classify(err).Definitive(), tc.name)
		require.NotContains(t, err.Error(), srv.Token(), tc.name)
		if tc.check != nil {
			tc.check(t, err)
		}
	}
	require.Empty(t, srv.Sent(), "a failed send must not be kept")

	// A kicked bot gets the real 403 from the fake.
	srv.KickBot(-1001234567890)
	_, err := ch.Send(t.Context(), out)
	require.Equal(t, channel.ClassKicked, channel.Classify(err), "%v", err)
}

func TestSendNetworkErrorIsTransient(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{OfflineMode: telegramtest.OfflineRefuse})
	ch := newChannel(t, srv, nil)
	require.NoError(t, srv.SetOffline(t.Context(), true))
	_, err := ch.Send(t.Context(), channel.Outgoing{Chat: channel.Chat{Kind: channel.Private, ID: "4242"}, Text: "hi"})
	require.Error(t, err)
	require.Equal(t, channel.ClassTransient, channel.Classify(err), "Run is not reporting offline, so a network error is transient: %v", err)
	require.NotContains(t, err.Error(), srv.Token())
	require.Contains(t, err.Error(), "bot<redacted>")
}

func TestSendLocalRejections(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	ch := newChannel(t, srv, nil)
	priv := channel.Chat{Kind: channel.Private, ID: "4242"}
	tests := []struct {
		name  string
		out   channel.Outgoing
		code  string
		media bool
	}{
		{"empty", channel.Outgoing{Chat: priv}, "empty_message", false},
		{"bad chat", channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: "abc"}, Text: "x"}, "bad_chat", false},
		{"no chat kind", channel.Outgoing{Chat: channel.Chat{ID: "1"}, Text: "x"}, "bad_chat", false},
		{"bad reply", channel.Outgoing{Chat: priv, Text: "x", ReplyTo: "in-1"}, "bad_reply_to", false},
		{"too long", channel.Outgoing{Chat: priv, Text: strings.Repeat("😀", 2049)}, "text_too_long", false},
		{"upload", channel.Outgoing{Chat: priv, Media: []channel.Media{{Name: "a.png", MIME: "image/png"}}}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ch.Send(t.Context(), tc.out)
			require.Error(t, err)
			if tc.media {
				require.ErrorIs(t, err, channel.ErrMediaInvalid)
				return
			}
			var rej *channel.RejectedError
			require.ErrorAs(t, err, &rej)
			require.Equal(t, tc.code, rej.Code)
		})
	}
	// 4096 UTF-16 units exactly is fine (2048 emoji of two units each).
	_, err := ch.Send(t.Context(), channel.Outgoing{Chat: priv, Text: strings.Repeat("😀", 2048)})
	require.NoError(t, err)
	require.Empty(t, srv.CallCount("getUpdates"))
	require.Len(t, srv.Sent(), 1)
}

func TestSendMediaAndMentions(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	srv.AddMember(group.ID, bob, "member")
	ch := newChannel(t, srv, nil)
	sink := newRecSink()
	run(t, ch, sink)
	// Alice is learned from her message; Bob is looked up with getChatMember.
	m, err := srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: "pic please"})
	require.NoError(t, err)
	ev := sink.waitEvents(t, 1)[0]

	rc, err := ch.Send(t.Context(), channel.Outgoing{
		Chat: ev.Chat, Text: "here 👉", ReplyTo: ev.MessageID, Mentions: []string{"4242", "5353", "999"},
		Media: []channel.Media{{FileID: "AgACAgIAAxkBAAI", MIME: "image/jpeg"}},
	})
	require.NoError(t, err)
	require.Len(t, rc.MessageIDs, 1, "one photo with the text as caption")
	sent := srv.Sent()
	require.Len(t, sent, 1)
	s := sent[0]
	require.Equal(t, "sendPhoto", s.Method)
	require.Equal(t, "AgACAgIAAxkBAAI", s.Media)
	require.Equal(t, m.MessageID, s.ReplyTo)
	require.Equal(t, "Alice Bob Builder here 👉", s.Text)
	require.Equal(t, []telegramtest.MessageEntity{
		{Type: "text_mention", Offset: 0, Length: 5, User: &telegramtest.User{ID: 4242, FirstName: "Alice"}},
		{Type: "text_mention", Offset: 6, Length: 11, User: &telegramtest.User{ID: 5353, FirstName: "Bob Builder"}},
	}, s.Entities)
	require.Equal(t, 2, srv.CallCount("getChatMember"), "Bob and 999 are looked up, Alice is known from her message")
	got, err := srv.Received(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"4242", "5353"}, got[0].Mentions)

	// Text plus two attachments: the text first (with the reply), then each medium.
	long := strings.Repeat("long caption ", 100) // over 1024 units: no caption
	rc, err = ch.Send(t.Context(), channel.Outgoing{
		Chat: ev.Chat, Text: long, ReplyTo: ev.MessageID,
		Media: []channel.Media{{URL: "https://example.com/v.ogg"}, {URL: "https://example.com/doc.pdf", MIME: "application/pdf"}},
	})
	require.NoError(t, err)
	require.Len(t, rc.MessageIDs, 3)
	sent = srv.Sent()[1:]
	require.Equal(t, []string{"sendMessage", "sendVoice", "sendDocument"}, []string{sent[0].Method, sent[1].Method, sent[2].Method})
	require.Equal(t, m.MessageID, sent[0].ReplyTo)
	require.Zero(t, sent[1].ReplyTo, "the quote goes on the first message only")
	require.Equal(t, "https://example.com/v.ogg", sent[1].Media)

	// A 400 on a media send is definitive and says the medium was refused.
	srv.FailNextSend(telegramtest.Failure{Code: 400, Description: "Bad Request: wrong file identifier/HTTP URL specified"})
	_, err = ch.Send(t.Context(), channel.Outgoing{Chat: ev.Chat, Media: []channel.Media{{FileID: "nope", MIME: "video/mp4"}}})
	require.ErrorIs(t, err, channel.ErrMediaInvalid)
	require.Equal(t, channel.ClassRejected, channel.Classify(err))
}

func TestTypingRecallLookup(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	srv.AddMember(group.ID, alice, "administrator")
	srv.AddMember(group.ID, bob, "left")
	ch := newChannel(t, srv, nil)
	gc := channel.Chat{Kind: channel.Group, ID: strconv.FormatInt(group.ID, 10)}

	require.NoError(t, ch.Typing(t.Context(), gc))
	acts := srv.ChatActions()
	require.Len(t, acts, 1)
	require.Equal(t, telegramtest.ChatAction{ChatID: group.ID, Action: "typing", At: acts[0].At}, acts[0])

	rc, err := ch.Send(t.Context(), channel.Outgoing{Chat: gc, Text: "oops"})
	require.NoError(t, err)
	require.NoError(t, ch.Recall(t.Context(), gc, rc.MessageIDs[0]))
	err = ch.Recall(t.Context(), gc, rc.MessageIDs[0])
	require.Equal(t, channel.ClassRejected, channel.Classify(err), "%v", err)

	mem, err := ch.LookupMember(t.Context(), gc, "4242")
	require.NoError(t, err)
	require.Equal(t, channel.Member{UserID: "4242", Name: "Alice", Role: channel.RoleAdmin}, mem)
	_, err = ch.LookupMember(t.Context(), gc, "5353")
	require.ErrorIs(t, err, telegram.ErrNotMember)
	_, err = ch.LookupMember(t.Context(), gc, "777")
	require.Equal(t, channel.ClassRejected, channel.Classify(err))
}

func TestRunUnauthorized(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	log, buf := newLogger()
	ch, err := telegram.New(telegram.Config{Token: "111:WRONG-token-value", APIBase: srv.URL(), Logger: log})
	require.NoError(t, err)
	sink := newRecSink()
	err = ch.Run(t.Context(), sink)
	require.ErrorIs(t, err, telegram.ErrUnauthorized)
	require.NotContains(t, err.Error(), "WRONG-token-value")
	require.NotContains(t, buf.String(), "WRONG-token-value")
	require.Contains(t, buf.String(), "telegram_unauthorized")
}

func TestRunTwiceRefused(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	ch := newChannel(t, srv, nil)
	sink := newRecSink()
	stop := run(t, ch, sink)
	sink.waitOnline(t, true)
	require.ErrorIs(t, ch.Run(t.Context(), newRecSink()), telegram.ErrRunning)
	require.NoError(t, stop())
	last := sink.States()[len(sink.States())-1]
	require.Equal(t, channel.State{Platform: "telegram", BotID: srv.BotID(), Reason: "stopped"}, last)
	require.Error(t, ch.Run(t.Context(), nil), "nil sink")
}

// The token must never reach a log line or an error, whatever fails.
func TestTokenNeverLogged(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{Token: "424242:TOPSECRET_token-value"})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *telegram.Config) { c.Logger = log; c.OfflineAfter = 1 })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	for _, mode := range []telegramtest.OfflineMode{telegramtest.Offline5xx, telegramtest.OfflineRefuse} {
		srv.SetOfflineMode(mode)
		require.NoError(t, srv.SetOffline(t.Context(), true))
		sink.waitOnline(t, false)
		_, err := ch.Send(t.Context(), channel.Outgoing{Chat: channel.Chat{Kind: channel.Private, ID: "1"}, Text: "x"})
		require.ErrorIs(t, err, channel.ErrOffline)
		require.NoError(t, srv.SetOffline(t.Context(), false))
		sink.waitOnline(t, true)
	}
	srv.FailNext("getUpdates", telegramtest.Failure{Code: 409})
	srv.Wake()
	waitLog(t, buf, "duplicate_client_conflict")
	require.NotContains(t, buf.String(), "TOPSECRET")
	for _, st := range sink.States() {
		require.NotContains(t, st.Reason, "TOPSECRET")
	}
	require.Contains(t, buf.String(), "telegram_poll_failed")
}

func TestRetryAfterOnPollHonoured(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	log, buf := newLogger()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	ch := newChannel(t, srv, func(c *telegram.Config) { c.Logger = log; c.Clock = clk })
	sink := newRecSink()
	srv.FailNext("getUpdates", telegramtest.Failure{Code: 429, RetryAfter: 30})
	run(t, ch, sink)
	require.NoError(t, srv.WaitCalls(t.Context(), "getUpdates", 1))
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond, "the retry timer")
	clk.Advance(29 * time.Second)
	require.Equal(t, 1, clk.Pending(), "retry_after (30 s), not the 5 ms backoff, must be waited")
	require.Equal(t, 1, srv.CallCount("getUpdates"))
	clk.Advance(time.Second)
	require.NoError(t, srv.WaitCalls(t.Context(), "getUpdates", 2))
	require.Contains(t, buf.String(), "Too Many Requests")
}

func TestAPIErrorText(t *testing.T) {
	t.Parallel()
	e := &telegram.APIError{Method: "sendMessage", Code: 400, Description: "Bad Request: chat not found", MigrateToChatID: -100}
	require.Equal(t, "telegram: sendMessage: error 400: Bad Request: chat not found (migrated to chat -100)", e.Error())
	require.False(t, errors.Is(e, channel.ErrRejected), "a hand-built APIError carries no classes")
	require.Equal(t, http.StatusBadRequest, e.Code)
}
