package channel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		err  error
		want channel.ErrorClass
	}{
		{name: "nil", err: nil, want: channel.ClassNone},
		{name: "plain", err: errors.New("connection reset"), want: channel.ClassTransient},
		{name: "deadline", err: context.DeadlineExceeded, want: channel.ClassTransient},
		{name: "offline", err: channel.ErrOffline, want: channel.ClassOffline},
		{name: "kicked", err: channel.ErrKicked, want: channel.ClassKicked},
		{name: "media", err: channel.ErrMediaInvalid, want: channel.ClassMediaInvalid},
		{name: "rate limited sentinel", err: channel.ErrRateLimited, want: channel.ClassRateLimited},
		{name: "rejected sentinel", err: channel.ErrRejected, want: channel.ClassRejected},
		{name: "muted sentinel", err: channel.ErrMuted, want: channel.ClassMuted},
		{name: "rate limited typed", err: &channel.RateLimitedError{RetryAfter: 3 * time.Second}, want: channel.ClassRateLimited},
		{name: "rejected typed", err: &channel.RejectedError{Code: "400", Reason: "chat not found"}, want: channel.ClassRejected},
		{name: "muted typed", err: &channel.MutedError{Until: until}, want: channel.ClassMuted},
		{name: "muted typed no deadline", err: &channel.MutedError{}, want: channel.ClassMuted},
		{name: "wrapped offline", err: fmt.Errorf("send: %w", channel.ErrOffline), want: channel.ClassOffline},
		{name: "wrapped kicked", err: fmt.Errorf("send: %w", channel.ErrKicked), want: channel.ClassKicked},
		{name: "wrapped media", err: fmt.Errorf("send: %w", channel.ErrMediaInvalid), want: channel.ClassMediaInvalid},
		{name: "wrapped rate limited", err: fmt.Errorf("send: %w", &channel.RateLimitedError{RetryAfter: time.Second}), want: channel.ClassRateLimited},
		{name: "wrapped rejected", err: fmt.Errorf("send: %w", &channel.RejectedError{Code: "1400"}), want: channel.ClassRejected},
		{name: "wrapped muted", err: fmt.Errorf("send: %w", &channel.MutedError{Until: until}), want: channel.ClassMuted},
		{name: "doubly wrapped", err: fmt.Errorf("a: %w", fmt.Errorf("b: %w", channel.ErrKicked)), want: channel.ClassKicked},
		{name: "joined", err: errors.Join(errors.New("x"), channel.ErrOffline), want: channel.ClassOffline},
		// Kicked wins over rejected: leaving the chat is more specific.
		{name: "kicked and rejected", err: errors.Join(&channel.RejectedError{Code: "403"}, channel.ErrKicked), want: channel.ClassKicked},
		{name: "muted and rejected", err: errors.Join(&channel.RejectedError{Code: "403"}, &channel.MutedError{}), want: channel.ClassMuted},
		{name: "message text is not classified", err: errors.New("channel: offline"), want: channel.ClassTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, channel.Classify(tt.err))
		})
	}
}

func TestErrorClassDefinitive(t *testing.T) {
	t.Parallel()
	want := map[channel.ErrorClass]bool{
		channel.ClassNone:         false,
		channel.ClassTransient:    false,
		channel.ClassOffline:      false,
		channel.ClassRateLimited:  false,
		channel.ClassRejected:     true,
		channel.ClassKicked:       true,
		channel.ClassMuted:        true,
		channel.ClassMediaInvalid: false,
	}
	for c, def := range want {
		require.Equal(t, def, c.Definitive(), "%s", c)
	}
}

func TestErrorClassString(t *testing.T) {
	t.Parallel()
	want := map[channel.ErrorClass]string{
		channel.ClassNone:         "none",
		channel.ClassTransient:    "transient",
		channel.ClassOffline:      "offline",
		channel.ClassRateLimited:  "rate_limited",
		channel.ClassRejected:     "rejected",
		channel.ClassKicked:       "kicked",
		channel.ClassMuted:        "muted",
		channel.ClassMediaInvalid: "media_invalid",
		channel.ErrorClass(99):    "class(99)",
		channel.ErrorClass(-1):    "class(-1)",
	}
	for c, s := range want {
		require.Equal(t, s, c.String())
	}
}

func TestTypedErrorsIs(t *testing.T) {
	t.Parallel()
	sentinels := []error{channel.ErrOffline, channel.ErrKicked, channel.ErrMediaInvalid, channel.ErrRateLimited, channel.ErrRejected, channel.ErrMuted}
	tests := []struct {
		err  error
		is   error
		text string
	}{
		{err: &channel.RateLimitedError{RetryAfter: 1500 * time.Millisecond}, is: channel.ErrRateLimited, text: "channel: rate limited, retry after 1.5s"},
		{err: &channel.RejectedError{Code: "400", Reason: "message too long"}, is: channel.ErrRejected, text: "channel: rejected (code 400): message too long"},
		{err: &channel.MutedError{}, is: channel.ErrMuted, text: "channel: muted"},
		{
			err:  &channel.MutedError{Until: time.Date(2026, 1, 2, 11, 4, 5, 0, time.FixedZone("CST", 8*3600))},
			is:   channel.ErrMuted,
			text: "channel: muted until 2026-01-02T03:04:05Z",
		},
	}
	for _, tt := range tests {
		require.Equal(t, tt.text, tt.err.Error())
		for _, s := range sentinels {
			require.Equal(t, s == tt.is, errors.Is(tt.err, s), "errors.Is(%T, %v)", tt.err, s)
			require.Equal(t, s == tt.is, errors.Is(fmt.Errorf("wrapped: %w", tt.err), s), "wrapped %T vs %v", tt.err, s)
		}
	}

	// errors.As still reaches the typed error through wrapping.
	var rl *channel.RateLimitedError
	require.ErrorAs(t, fmt.Errorf("send: %w", &channel.RateLimitedError{RetryAfter: time.Minute}), &rl)
	require.Equal(t, time.Minute, rl.RetryAfter)
	var rj *channel.RejectedError
	require.ErrorAs(t, fmt.Errorf("send: %w", &channel.RejectedError{Code: "230001"}), &rj)
	require.Equal(t, "230001", rj.Code)

	// Two distinct typed values do not match each other.
	require.NotErrorIs(t, &channel.RejectedError{Code: "1"}, &channel.RejectedError{Code: "2"})
}
