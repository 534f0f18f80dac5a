package channel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

// forwarder claims to type and to recall for whatever channel it wraps.
type forwarder struct{ wrapper }

func (forwarder) ForwardsCapabilities()                              {}
func (forwarder) Typing(context.Context, channel.Chat) error         { return nil }
func (forwarder) Recall(context.Context, channel.Chat, string) error { return nil }

// typingChannel is a channel that can show typing (and nothing else).
type typingChannel struct{ plainChannel }

func (typingChannel) Typing(context.Context, channel.Chat) error { return nil }

var _ channel.Forwarder = forwarder{}

// A forwarder's capability is found only when the channel it wraps has
// it; then the forwarder answers for it.
func TestAsForwarder(t *testing.T) {
	t.Parallel()
	over := func(inner channel.Channel) forwarder { return forwarder{wrapper{inner: inner}} }

	bare := over(plainChannel{})
	_, ok := channel.As[channel.Typer](bare)
	require.False(t, ok, "the wrapped channel cannot type")
	_, ok = channel.As[channel.Recaller](bare)
	require.False(t, ok)
	_, ok = bare.Unwrap().(channel.Typer)
	require.False(t, ok)

	typing := over(typingChannel{})
	got, ok := channel.As[channel.Typer](typing)
	require.True(t, ok)
	require.Equal(t, typing, got, "the forwarder answers, not the channel it wraps")
	_, ok = channel.As[channel.Recaller](typing)
	require.False(t, ok, "only the capabilities the wrapped channel has")

	// The capability further down, under a plain wrapper.
	deep := over(wrapper{inner: typingChannel{}})
	got, ok = channel.As[channel.Typer](deep)
	require.True(t, ok)
	require.Equal(t, deep, got)

	// Forwarders over forwarders: still only what the last channel has.
	stacked := over(over(plainChannel{}))
	_, ok = channel.As[channel.Typer](stacked)
	require.False(t, ok)
	stacked = over(over(typingChannel{}))
	got, ok = channel.As[channel.Typer](stacked)
	require.True(t, ok)
	require.Equal(t, stacked, got, "the outermost one answers")

	// A plain wrapper that implements the capability itself above a
	// forwarder over a channel without it: the plain wrapper counts.
	tw := typingWrapper{wrapper{inner: bare}}
	gotW, ok := channel.As[channel.Typer](tw)
	require.True(t, ok)
	require.Equal(t, tw, gotW)

	// Capabilities the forwarder does not implement are found through
	// it, as through any wrapper.
	limited := over(limitedChannel{limit: channel.TextLimit{Unit: channel.UTF16, Max: 99}})
	require.Equal(t, channel.TextLimit{Unit: channel.UTF16, Max: 99}, channel.LimitOf(limited))
}
