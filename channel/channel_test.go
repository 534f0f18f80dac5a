package channel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

// plainChannel declares no text limit.
type plainChannel struct{}

func (plainChannel) Name() string                            { return "plain" }
func (plainChannel) Run(context.Context, channel.Sink) error { return nil }
func (plainChannel) Send(context.Context, channel.Outgoing) (channel.Receipt, error) {
	return channel.Receipt{}, nil
}

// limitedChannel declares a text limit.
type limitedChannel struct {
	plainChannel
	limit channel.TextLimit
}

func (c limitedChannel) TextLimit() channel.TextLimit { return c.limit }

func TestLimitOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ch   channel.Channel
		want channel.TextLimit
	}{
		{name: "no limiter", ch: plainChannel{}, want: channel.DefaultTextLimit},
		{name: "declared runes", ch: limitedChannel{limit: channel.TextLimit{Unit: channel.Runes, Max: 900}}, want: channel.TextLimit{Unit: channel.Runes, Max: 900}},
		{name: "declared utf16", ch: limitedChannel{limit: channel.TextLimit{Unit: channel.UTF16, Max: 4000}}, want: channel.TextLimit{Unit: channel.UTF16, Max: 4000}},
		{name: "declared bytes", ch: limitedChannel{limit: channel.TextLimit{Unit: channel.Bytes, Max: 2000}}, want: channel.TextLimit{Unit: channel.Bytes, Max: 2000}},
		{name: "zero max means default", ch: limitedChannel{limit: channel.TextLimit{Unit: channel.Bytes}}, want: channel.DefaultTextLimit},
		{name: "negative max means default", ch: limitedChannel{limit: channel.TextLimit{Unit: channel.UTF16, Max: -1}}, want: channel.DefaultTextLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, channel.LimitOf(tt.ch))
		})
	}
	require.Equal(t, channel.TextLimit{Unit: channel.Runes, Max: 2000}, channel.DefaultTextLimit)
}

func TestSinkFunc(t *testing.T) {
	t.Parallel()
	var got []string
	boom := errors.New("boom")
	sink := channel.SinkFunc(func(_ context.Context, ev channel.Event) error {
		got = append(got, ev.MessageID)
		if ev.MessageID == "bad" {
			return boom
		}
		return nil
	})
	var _ channel.Sink = sink
	require.NoError(t, sink.HandleEvent(t.Context(), channel.Event{MessageID: "1"}))
	require.ErrorIs(t, sink.HandleEvent(t.Context(), channel.Event{MessageID: "bad"}), boom)
	sink.ReportState(t.Context(), channel.State{Connected: true}) // no-op
	require.Equal(t, []string{"1", "bad"}, got)
}

// wrapper wraps a channel (as the delivery exit does) and adds nothing.
type wrapper struct {
	plainChannel
	inner channel.Channel
}

func (w wrapper) Unwrap() channel.Channel { return w.inner }

// typingWrapper wraps a channel and is a Typer itself.
type typingWrapper struct{ wrapper }

func (typingWrapper) Typing(context.Context, channel.Chat) error { return nil }

func TestAsLooksThroughWrappers(t *testing.T) {
	t.Parallel()
	inner := limitedChannel{limit: channel.TextLimit{Unit: channel.Bytes, Max: 700}}
	outer := wrapper{inner: wrapper{inner: inner}}
	l, ok := channel.As[channel.TextLimiter](outer)
	require.True(t, ok, "found two wrappers down")
	require.Equal(t, 700, l.TextLimit().Max)
	require.Equal(t, inner.limit, channel.LimitOf(outer), "LimitOf sees through wrappers")

	_, ok = channel.As[channel.Typer](outer)
	require.False(t, ok, "nobody in the chain types")
	tw := typingWrapper{wrapper{inner: outer}}
	got, ok := channel.As[channel.Typer](tw)
	require.True(t, ok)
	require.Equal(t, tw, got, "a wrapper that implements the capability is found first")

	_, ok = channel.As[channel.Typer](nil)
	require.False(t, ok)
	// A wrapper whose chain loops ends the search instead of spinning.
	var loop selfWrapper
	_, ok = channel.As[channel.Typer](loop)
	require.False(t, ok)
}

// selfWrapper unwraps to itself.
type selfWrapper struct{ plainChannel }

func (s selfWrapper) Unwrap() channel.Channel { return s }
