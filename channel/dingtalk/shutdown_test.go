package dingtalk_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
)

// TestShutdownOffersQueuedMessages: when Run stops, the message with the
// sink and those queued behind it are offered once more, in order, with a
// live context; none is lost when the sink takes them. (A message beyond
// the backlog is refused at once; it shows the others are queued.)
func TestShutdownOffersQueuedMessages(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) { c.Backlog = 3 })
	ctx := tctx(t)
	entered := make(chan struct{}, 8)
	var first atomic.Bool
	first.Store(true)
	r.sink.SetHandler(func(hctx context.Context, ev channel.Event) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		if ev.Text() == "a" && first.CompareAndSwap(true, false) {
			<-hctx.Done() // busy until Run stops
			return hctx.Err()
		}
		if hctx.Err() != nil {
			return errors.New("offered with a dead context")
		}
		return nil
	})
	var ids []string
	for _, txt := range []string{"a", "b", "c", "d", "beyond the backlog"} {
		p, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: txt})
		require.NoError(t, err)
		ids = append(ids, p.MsgID)
		if txt == "a" {
			<-entered
		}
	}
	waitLog(t, r.logs, "dingtalk_backlog_full", 1)
	ids = ids[:4]
	require.NoError(t, r.stop())

	var got []string
	for _, ev := range r.sink.Events() {
		got = append(got, ev.MessageID)
	}
	require.Equal(t, ids, got, "all accepted at shutdown, in order; log:\n%s", r.logs)
	recs, err := r.logs.Records("dingtalk_event_dropped")
	require.NoError(t, err)
	require.Empty(t, recs)
	waitLog(t, r.logs, "dingtalk_flushing", 1)
}

// TestShutdownLogsEveryLostMessage: messages the sink still refuses at
// shutdown are each logged as dropped.
func TestShutdownLogsEveryLostMessage(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) { c.Backlog = 2 })
	ctx := tctx(t)
	entered := make(chan struct{}, 8)
	var first atomic.Bool
	first.Store(true)
	r.sink.SetHandler(func(hctx context.Context, ev channel.Event) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		if ev.Text() == "a" && first.CompareAndSwap(true, false) {
			<-hctx.Done() // busy until Run stops
		}
		return errors.New("disk full")
	})
	ids := map[string]bool{}
	for _, txt := range []string{"a", "b", "c", "beyond the backlog"} {
		p, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: txt})
		require.NoError(t, err)
		if txt == "a" {
			<-entered
		}
		if txt != "beyond the backlog" {
			ids[p.MsgID] = true
		}
	}
	waitLog(t, r.logs, "dingtalk_backlog_full", 1)
	require.NoError(t, r.stop())
	recs := waitLog(t, r.logs, "dingtalk_event_dropped", 3)
	require.Len(t, recs, 3, "each lost message once")
	for _, rec := range recs {
		require.True(t, ids[rec["message_id"].(string)], "%v", rec)
		delete(ids, rec["message_id"].(string))
	}
	require.Empty(t, r.sink.Events())
}
