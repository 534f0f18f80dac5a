package telegram_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
)

// Bad input on the polling path: malformed responses, malformed and
// unknown updates. Each is logged, the loop survives, nothing panics, and
// updates that cannot become events are acknowledged.
func TestPollingBadInput(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *telegram.Config) { c.Logger = log })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)

	// A broken response body, then a result that is not an update list.
	srv.FailNext("getUpdates", telegramtest.Failure{Code: 200, Body: `{"ok":true,"result":[`})
	srv.FailNext("getUpdates", telegramtest.Failure{Code: 200, Body: `{"ok":true,"result":{"update_id":1}}`})
	srv.FailNext("getUpdates", telegramtest.Failure{Code: 200, Body: `{"ok":true,"result":[{"no_update_id":1},"text"]}`})
	srv.Wake()
	waitLog(t, buf, "malformed response")
	waitLog(t, buf, "malformed result")
	waitLog(t, buf, "telegram_update_malformed")

	// Unknown and malformed updates are skipped and acknowledged.
	for _, raw := range []string{
		`{"callback_query":{"id":"4382bfdwdsb323b2d9","from":{"id":1111111,"first_name":"Test"},"data":"Data from button callback"}}`,
		`{"message":"not an object"}`,
		`{"message":{"message_id":1,"date":1,"chat":{"id":-1001,"type":"channel","title":"news"},"text":"x"}}`,
		`{"my_chat_member":{"chat":{"id":-1001,"type":"supergroup"}}}`,
	} {
		_, err := srv.PushRaw(t.Context(), []byte(raw))
		require.NoError(t, err)
	}
	_, err := srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: "still alive"})
	require.NoError(t, err)
	ev := sink.waitEvents(t, 1)
	require.Len(t, ev, 1)
	require.Equal(t, "still alive", ev[0].Text())
	for _, line := range []string{"unsupported update type callback_query", "malformed update: ", `unsupported chat type \"channel\"`, "unsupported update type my_chat_member"} {
		waitLog(t, buf, line)
	}
	require.Eventually(t, func() bool { return srv.Pending() == 0 }, waitTimeout, time.Millisecond,
		"skipped updates are confirmed, not fetched forever")
	require.Equal(t, int64(telegramtest.DefaultFirstUpdateID+5), srv.Offset())
}

// allowed_updates: nil sends the defaults; an empty list is sent as []
// (all types but a few), not dropped.
func TestAllowedUpdatesSent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []string
		want []string
	}{
		{"default", nil, telegram.DefaultAllowedUpdates},
		{"empty means all", []string{}, []string{}},
		{"custom", []string{"message"}, []string{"message"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFake(t, telegramtest.Config{})
			ch := newChannel(t, srv, func(c *telegram.Config) { c.AllowedUpdates = tc.in })
			run(t, ch, newRecSink())
			require.Eventually(t, func() bool { return srv.AllowedUpdates() != nil }, waitTimeout, time.Millisecond)
			require.Equal(t, tc.want, srv.AllowedUpdates())
		})
	}
}
