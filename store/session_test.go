package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/store"
)

func TestNewestSessionEventTime(t *testing.T) {
	t.Parallel()
	db, err := store.Open(t.TempDir()+"/s.db", store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ctx := t.Context()
	chat := channel.Chat{Kind: channel.Group, ID: "1"}
	key := channel.SessionKey("", "p", "b", chat)
	base := time.UnixMilli(1_700_000_000_000)
	for i, at := range []time.Time{base, base.Add(time.Minute), base.Add(time.Hour)} {
		ev := channel.Event{Platform: "p", BotID: "b", Kind: channel.KindMessage, Chat: chat,
			MessageID: string(rune('a' + i)), Time: at, SessionKey: key}
		require.NoError(t, db.Append(ctx, memory.Entry{Key: ev.Key(), SessionKey: key, Direction: memory.In, Event: ev}))
	}
	got, ok, err := db.NewestSessionEventTime(ctx, key, base.Add(30*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, base.Add(time.Minute).UnixMilli(), got.UnixMilli())
	_, ok, err = db.NewestSessionEventTime(ctx, key, base)
	require.NoError(t, err)
	require.False(t, ok)
	_, ok, err = db.NewestSessionEventTime(ctx, "other", base.Add(2*time.Hour))
	require.NoError(t, err)
	require.False(t, ok)
}
