package gatetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/gate"
)

// RunFlags runs the gate.Flags conformance suite against the
// implementations newFlags returns (a fresh, empty one per subtest).
// Deadlines are compared at millisecond precision, the unit of stored
// timestamps.
func RunFlags(t *testing.T, newFlags func(t *testing.T) gate.Flags) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	same := func(t *testing.T, want, got gate.Flag) {
		t.Helper()
		require.Equal(t, want.SessionKey, got.SessionKey)
		require.Equal(t, want.Subject, got.Subject)
		require.Equal(t, want.Name, got.Name)
		require.Equal(t, want.Value, got.Value)
		require.True(t, want.Until.Equal(got.Until), "until: want %s, got %s", want.Until, got.Until)
	}

	t.Run("subject probe", func(t *testing.T) {
		f := newFlags(t)
		p, ok := f.(gate.SubjectFlagProber)
		if !ok {
			t.Skip("the Flags does not implement gate.SubjectFlagProber")
		}
		has := func(session, name string) bool {
			t.Helper()
			v, err := p.HasSubjectFlags(t.Context(), session, name)
			require.NoError(t, err)
			return v
		}
		require.False(t, has("s", "pause"))
		require.NoError(t, f.SetFlag(t.Context(), gate.Flag{SessionKey: "s", Name: "pause"}))
		require.False(t, has("s", "pause"), "a session-wide flag has no subject")
		require.NoError(t, f.SetFlag(t.Context(), gate.Flag{SessionKey: "s", Subject: "u1", Name: "pause", Until: t0}))
		require.True(t, has("s", "pause"), "expired flags count too")
		require.False(t, has("s", "other"))
		require.False(t, has("s2", "pause"))
		require.NoError(t, f.ClearFlag(t.Context(), "s", "u1", "pause"))
		require.False(t, has("s", "pause"))
	})
	t.Run("missing", func(t *testing.T) {
		f := newFlags(t)
		_, ok, err := f.GetFlag(t.Context(), "s", "", "n")
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, f.ClearFlag(t.Context(), "s", "", "n"), "clearing a missing flag is not an error")
	})
	t.Run("set get replace clear", func(t *testing.T) {
		f := newFlags(t)
		fl := gate.Flag{SessionKey: "s", Subject: "u1", Name: "pause", Until: t0.Add(time.Minute), Value: "because"}
		require.NoError(t, f.SetFlag(t.Context(), fl))
		got, ok, err := f.GetFlag(t.Context(), "s", "u1", "pause")
		require.NoError(t, err)
		require.True(t, ok)
		same(t, fl, got)

		fl.Until, fl.Value = t0.Add(time.Hour), "again"
		require.NoError(t, f.SetFlag(t.Context(), fl))
		got, _, err = f.GetFlag(t.Context(), "s", "u1", "pause")
		require.NoError(t, err)
		same(t, fl, got)

		require.NoError(t, f.ClearFlag(t.Context(), "s", "u1", "pause"))
		_, ok, err = f.GetFlag(t.Context(), "s", "u1", "pause")
		require.NoError(t, err)
		require.False(t, ok)
	})
	t.Run("keys are independent", func(t *testing.T) {
		f := newFlags(t)
		flags := []gate.Flag{
			{SessionKey: "s", Name: "a", Until: t0.Add(1 * time.Minute)},
			{SessionKey: "s", Subject: "u", Name: "a", Until: t0.Add(2 * time.Minute)},
			{SessionKey: "s", Name: "b", Until: t0.Add(3 * time.Minute)},
			{SessionKey: "s2", Name: "a", Until: t0.Add(4 * time.Minute)},
		}
		for _, fl := range flags {
			require.NoError(t, f.SetFlag(t.Context(), fl))
		}
		for _, fl := range flags {
			got, ok, err := f.GetFlag(t.Context(), fl.SessionKey, fl.Subject, fl.Name)
			require.NoError(t, err)
			require.True(t, ok)
			same(t, fl, got)
		}
		require.NoError(t, f.ClearFlag(t.Context(), "s", "u", "a"))
		_, ok, err := f.GetFlag(t.Context(), "s", "", "a")
		require.NoError(t, err)
		require.True(t, ok, "clearing one subject keeps the others")
	})
	t.Run("expired flags are returned", func(t *testing.T) {
		f := newFlags(t)
		fl := gate.Flag{SessionKey: "s", Name: "old", Until: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)}
		require.NoError(t, f.SetFlag(t.Context(), fl))
		got, ok, err := f.GetFlag(t.Context(), "s", "", "old")
		require.NoError(t, err)
		require.True(t, ok)
		require.False(t, got.Active(t0))
	})
	t.Run("far deadline", func(t *testing.T) {
		f := newFlags(t)
		fl := gate.Flag{SessionKey: "s", Name: "mark", Until: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), Value: "1 x"}
		require.NoError(t, f.SetFlag(t.Context(), fl))
		got, ok, err := f.GetFlag(t.Context(), "s", "", "mark")
		require.NoError(t, err)
		require.True(t, ok)
		same(t, fl, got)
	})
	t.Run("batch", func(t *testing.T) {
		f := newFlags(t)
		b, ok := f.(gate.BatchFlags)
		if !ok {
			t.Skip("not a gate.BatchFlags")
		}
		flags := []gate.Flag{
			{SessionKey: "s", Name: "a", Until: t0.Add(time.Minute), Value: "1"},
			{SessionKey: "s", Subject: "u", Name: "a", Until: t0.Add(time.Hour), Value: "2"},
		}
		require.NoError(t, b.SetFlags(t.Context(), flags))
		require.NoError(t, b.SetFlags(t.Context(), nil), "an empty batch is not an error")
		flags[0].Value = "3"
		require.NoError(t, b.SetFlags(t.Context(), flags[:1]))
		for _, fl := range flags {
			got, ok, err := f.GetFlag(t.Context(), fl.SessionKey, fl.Subject, fl.Name)
			require.NoError(t, err)
			require.True(t, ok)
			same(t, fl, got)
		}
		require.Error(t, b.SetFlags(t.Context(), []gate.Flag{{Name: "n"}, {SessionKey: "s", Name: "b"}}))
		_, ok, err := f.GetFlag(t.Context(), "s", "", "b")
		require.NoError(t, err)
		require.False(t, ok, "a batch that starts with a bad flag writes nothing")
	})
	t.Run("needs session key and name", func(t *testing.T) {
		f := newFlags(t)
		require.Error(t, f.SetFlag(t.Context(), gate.Flag{Name: "n"}))
		require.Error(t, f.SetFlag(t.Context(), gate.Flag{SessionKey: "s"}))
	})
}
