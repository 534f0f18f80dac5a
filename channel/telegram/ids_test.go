package telegram_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
)

// Updates whose ids are out of the Bot API's range or of the wrong type.
var invalidUpdates = []struct{ body, reason string }{
	{`{"update_id":81,"message":{"message_id":1e30,"date":1700000000,"chat":{"id":-1,"type":"group","title":"G"},"from":{"id":4242,"first_name":"A"},"text":"x"}}`,
		"malformed update: "},
	{`{"update_id":82,"message":{"message_id":2147483648,"date":1700000000,"chat":{"id":4242,"type":"private"},"from":{"id":4242,"first_name":"A"},"text":"x"}}`,
		"invalid id: message_id 2147483648"},
	{`{"update_id":83,"message":{"message_id":5,"date":1700000000,"chat":{"id":-4242,"type":"private"},"from":{"id":4242,"first_name":"A"},"text":"x"}}`,
		"invalid id: chat.id -4242: a private chat's id is positive"},
	{`{"update_id":84,"message":{"message_id":5,"date":1700000000,"chat":{"id":4242,"type":"private"},"from":{"id":-1,"first_name":"A"},"text":"x"}}`,
		"invalid id: from.id -1"},
	{`{"update_id":85,"message":{"message_id":5,"date":1700000000,"chat":{"id":4242,"type":"private"},"from":{"id":"4242","first_name":"A"},"text":"x"}}`,
		"malformed update: "},
	{`{"update_id":86,"edited_message":{"message_id":-5,"date":1700000000,"chat":{"id":4242,"type":"private"},"from":{"id":4242,"first_name":"A"},"text":"x"}}`,
		"invalid id: message_id -5"},
}

// TestWebhookInvalidIDs: the webhook acknowledges (200) an update with an
// id out of range, since redelivery cannot make it valid, logs it as a
// warning with the reason, and delivers no event.
func TestWebhookInvalidIDs(t *testing.T) {
	t.Parallel()
	env := startWebhook(t, nil)
	for _, u := range invalidUpdates {
		st, _, err := telegramtest.PostWebhook(t.Context(), env.url, secret, []byte(u.body))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, st, u.body)
		waitLog(t, env.log, u.reason)
	}
	waitLog(t, env.log, "level=WARN msg=telegram_update_invalid")
	require.NotContains(t, env.log.String(), "telegram_update_skipped", "an invalid update is not merely unsupported")
	require.Empty(t, env.sink.Events())
}

// TestPollingInvalidIDs: in polling mode such updates are confirmed (the
// offset moves past them), logged, and the next update is delivered.
func TestPollingInvalidIDs(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *telegram.Config) { c.Logger = log })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	for _, u := range invalidUpdates {
		_, err := srv.PushRaw(t.Context(), []byte(u.body))
		require.NoError(t, err)
	}
	_, err := srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: "still alive"})
	require.NoError(t, err)
	evs := sink.waitEvents(t, 1)
	require.Len(t, evs, 1)
	require.Equal(t, "still alive", evs[0].Text())
	for _, u := range invalidUpdates {
		waitLog(t, buf, u.reason)
	}
	require.Eventually(t, func() bool { return srv.Pending() == 0 }, waitTimeout, time.Millisecond,
		"invalid updates are confirmed, not fetched forever")
}

// TestSendReceiptIDs: a sent message whose message_id is out of range
// fails the send with an error naming it instead of going into the
// receipt.
func TestSendReceiptIDs(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *telegram.Config) { c.Logger = log })
	out := channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: "-1001234567890"}, Text: "hi"}
	for raw, want := range map[string]string{
		"0":                   "message_id 0: not a positive 32-bit message id",
		"-1":                  "message_id -1",
		"2147483648":          "message_id 2147483648",
		"1e30":                "malformed result",
		"1.5":                 "malformed result",
		`"7"`:                 "malformed result",
		"9223372036854775808": "malformed result",
	} {
		srv.FailNextSend(telegramtest.Failure{Code: 200, Body: `{"ok":true,"result":{"message_id":` + raw + `,"date":1700000000,"chat":{"id":-1001234567890,"type":"supergroup"}}}`})
		rc, err := ch.Send(t.Context(), out)
		require.ErrorContains(t, err, want, raw)
		require.Empty(t, rc.MessageIDs, raw)
	}
	waitLog(t, buf, "telegram_invalid_receipt")

	// A media send is checked too.
	srv.FailNext("sendPhoto", telegramtest.Failure{Code: 200, Body: `{"ok":true,"result":{"message_id":0,"date":1700000000}}`})
	_, err := ch.Send(t.Context(), channel.Outgoing{Chat: out.Chat, Media: []channel.Media{{FileID: "f", MIME: "image/png"}}})
	require.ErrorContains(t, err, "sendPhoto: the result has message_id 0")
}

// TestOutgoingIDsChecked: chats, message ids and users out of range are
// refused before any call, as definitive rejections.
func TestOutgoingIDsChecked(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *telegram.Config) { c.Logger = log })
	priv := channel.Chat{Kind: channel.Private, ID: "4242"}
	for _, id := range []string{"0", "4503599627370496", "-4503599627370496", "9223372036854775807"} {
		_, err := ch.Send(t.Context(), channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: id}, Text: "x"})
		require.ErrorIs(t, err, channel.ErrRejected, id)
		require.ErrorIs(t, ch.Typing(t.Context(), channel.Chat{Kind: channel.Group, ID: id}), channel.ErrRejected, id)
	}
	for _, id := range []string{"0", "-1", "2147483648", "1e3", "1.5"} {
		_, err := ch.Send(t.Context(), channel.Outgoing{Chat: priv, Text: "x", ReplyTo: id})
		require.ErrorIs(t, err, channel.ErrRejected, id)
		require.ErrorIs(t, ch.Recall(t.Context(), priv, id), channel.ErrRejected, id)
	}
	for _, id := range []string{"0", "-1", "4503599627370496", "x"} {
		_, err := ch.LookupMember(t.Context(), channel.Chat{Kind: channel.Group, ID: "-1001234567890"}, id)
		require.ErrorIs(t, err, channel.ErrRejected, id)
	}
	for _, m := range []string{"sendMessage", "sendChatAction", "deleteMessage", "getChatMember"} {
		require.Zero(t, srv.CallCount(m), m)
	}

	// A mention out of range is dropped (and logged); the text goes out.
	_, err := ch.Send(t.Context(), channel.Outgoing{Chat: priv, Text: "x", Mentions: []string{"-5"}})
	require.NoError(t, err)
	waitLog(t, buf, "telegram_mention_dropped")
	require.Zero(t, srv.CallCount("getChatMember"))
}

// TestGetMeInvalidID: a getMe result whose id is out of range is not
// adopted as the bot id; Run logs it and retries.
func TestGetMeInvalidID(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	srv.FailNext("getMe", telegramtest.Failure{Code: 200, Body: `{"ok":true,"result":{"id":-1,"is_bot":true,"first_name":"Bot"}}`})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *telegram.Config) { c.Logger = log })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	waitLog(t, buf, "getMe: the result has id -1")
	require.Equal(t, srv.BotID(), ch.BotID())
}
