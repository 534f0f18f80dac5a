package inbound_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
)

func TestItemNormalize(t *testing.T) {
	chat := channel.Chat{Kind: channel.Private, ID: "u1"}
	ev := channel.Event{Platform: "p", BotID: "b", Kind: channel.KindMessage, Chat: chat, MessageID: "m1",
		SessionKey: channel.SessionKey("default", "p", "b", chat)}
	it := inbound.Item{Event: ev}
	require.NoError(t, it.Normalize())
	require.Equal(t, ev.Key(), it.ID)
	require.Equal(t, ev.SessionKey, it.SessionKey)
	require.Equal(t, channel.Private, it.LimitKind())

	require.ErrorIs(t, (&inbound.Item{}).Normalize(), inbound.ErrInvalidItem)
	require.ErrorIs(t, (&inbound.Item{ID: "x"}).Normalize(), inbound.ErrInvalidItem)

	// Without an event chat kind the session key names it; else group.
	bare := inbound.Item{ID: "x", SessionKey: ev.SessionKey}
	require.Equal(t, channel.Private, bare.LimitKind())
	require.Equal(t, channel.Group, (&inbound.Item{ID: "x", SessionKey: "odd"}).LimitKind())
}
