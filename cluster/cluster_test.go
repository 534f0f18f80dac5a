package cluster_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/cluster"
)

// roundTrip records err, passes the record through JSON (as a store
// keeps it) and rebuilds it.
func roundTrip(t *testing.T, err error) error {
	t.Helper()
	b, jerr := json.Marshal(cluster.RecordError(err))
	require.NoError(t, jerr)
	var rec cluster.ErrorRecord
	require.NoError(t, json.Unmarshal(b, &rec))
	return rec.Err()
}

// A send error rebuilt in another process keeps its text, its class and
// what errors.Is and errors.As find in it.
func TestErrorRecordRoundTrip(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 5, 1, 12, 30, 0, 0, time.UTC)
	cases := []struct {
		name  string
		err   error
		check func(t *testing.T, got error)
	}{
		{"rejected", fmt.Errorf("api: %w", &channel.RejectedError{Code: "40054005", Reason: "duplicate"}), func(t *testing.T, got error) {
			var rj *channel.RejectedError
			require.ErrorAs(t, got, &rj)
			require.Equal(t, "40054005", rj.Code)
			require.Equal(t, "duplicate", rj.Reason)
			require.ErrorIs(t, got, channel.ErrRejected)
		}},
		{"rate limited", &channel.RateLimitedError{RetryAfter: 1500 * time.Millisecond}, func(t *testing.T, got error) {
			var rl *channel.RateLimitedError
			require.ErrorAs(t, got, &rl)
			require.Equal(t, 1500*time.Millisecond, rl.RetryAfter)
			require.ErrorIs(t, got, channel.ErrRateLimited)
		}},
		{"muted", &channel.MutedError{Until: until}, func(t *testing.T, got error) {
			var mu *channel.MutedError
			require.ErrorAs(t, got, &mu)
			require.True(t, until.Equal(mu.Until))
		}},
		{"muted without end", &channel.MutedError{}, func(t *testing.T, got error) {
			var mu *channel.MutedError
			require.ErrorAs(t, got, &mu)
			require.True(t, mu.Until.IsZero())
		}},
		{"kicked and rejected", errors.Join(channel.ErrKicked, &channel.RejectedError{Code: "403"}), func(t *testing.T, got error) {
			require.ErrorIs(t, got, channel.ErrKicked)
			require.ErrorIs(t, got, channel.ErrRejected)
		}},
		{"offline", fmt.Errorf("down: %w", channel.ErrOffline), func(t *testing.T, got error) {
			require.ErrorIs(t, got, channel.ErrOffline)
		}},
		{"media invalid", channel.ErrMediaInvalid, func(t *testing.T, got error) {
			require.ErrorIs(t, got, channel.ErrMediaInvalid)
		}},
		{"unconfirmed", fmt.Errorf("lost: %w", channel.ErrUnconfirmed), func(t *testing.T, got error) {
			require.ErrorIs(t, got, channel.ErrUnconfirmed)
		}},
		{"transient", errors.New("connection reset"), func(t *testing.T, got error) {
			require.NotErrorIs(t, got, channel.ErrOffline)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := roundTrip(t, tc.err)
			require.Error(t, got)
			require.Contains(t, got.Error(), tc.err.Error())
			require.Equal(t, channel.Classify(tc.err), channel.Classify(got))
			var re *cluster.RemoteError
			require.ErrorAs(t, got, &re)
			tc.check(t, got)
		})
	}
	require.Nil(t, cluster.RecordError(nil))
	require.NoError(t, (*cluster.ErrorRecord)(nil).Err())
}

func TestRequestStatusFinal(t *testing.T) {
	t.Parallel()
	for s, final := range map[cluster.RequestStatus]bool{
		cluster.StatusPending: false, cluster.StatusClaimed: false, cluster.StatusDone: true,
		cluster.StatusFailed: true, cluster.StatusUnconfirmed: true, cluster.StatusCancelled: true,
	} {
		require.Equal(t, final, s.Final(), s)
	}
}

// shareableChannel is a channel that says whether it may run in several
// processes at once.
type shareableChannel struct {
	*testChannel
	shareable bool
}

func (c shareableChannel) Shareable() bool { return c.shareable }

// Share leaves a shareable channel alone, and otherwise wraps it so that
// the wrapped channel's capabilities are still found.
func TestShareWrapsOnlyWhatIsNotShareable(t *testing.T) {
	t.Parallel()
	var st cluster.Store = nopStore{}
	yes := shareableChannel{testChannel: newTestChannel("a", newPlatform()), shareable: true}
	require.Equal(t, channel.Channel(yes), cluster.Share(yes, st, cluster.Options{}))

	no := shareableChannel{testChannel: newTestChannel("a", newPlatform())}
	sh := cluster.Share(no, st, cluster.Options{})
	require.NotEqual(t, channel.Channel(no), sh)
	require.Equal(t, "test", sh.Name())
	w, ok := sh.(channel.Wrapper)
	require.True(t, ok)
	require.Equal(t, channel.Channel(no), w.Unwrap())
	require.Equal(t, channel.TextLimit{Unit: channel.Runes, Max: 321}, channel.LimitOf(sh))

	plain := newTestChannel("b", newPlatform())
	require.Equal(t, channel.Channel(plain), cluster.Share(plain, nil, cluster.Options{}), "no store, nothing to share")
}

// nopStore is a Store for tests that never reach it.
type nopStore struct{ cluster.Store }
