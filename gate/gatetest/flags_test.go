package gatetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/gate/gatetest"
)

func TestFlagsConformance(t *testing.T) {
	t.Parallel()
	gatetest.RunFlags(t, func(*testing.T) gate.Flags { return gatetest.NewFlags() })
}

func TestFlagsZeroValue(t *testing.T) {
	t.Parallel()
	var f gatetest.Flags
	_, ok, err := f.GetFlag(t.Context(), "s", "", "n")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, f.ClearFlag(t.Context(), "s", "", "n"))
	require.NoError(t, f.SetFlag(t.Context(), gate.Flag{SessionKey: "s", Name: "n"}))
}

func TestFlagsFailWith(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	f := gatetest.NewFlags()
	f.FailWith(boom)
	require.ErrorIs(t, f.SetFlag(t.Context(), gate.Flag{SessionKey: "s", Name: "n"}), boom)
	_, _, err := f.GetFlag(t.Context(), "s", "", "n")
	require.ErrorIs(t, err, boom)
	require.ErrorIs(t, f.ClearFlag(t.Context(), "s", "", "n"), boom)
	f.FailWith(nil)
	require.NoError(t, f.SetFlag(t.Context(), gate.Flag{SessionKey: "s", Name: "n"}))
}

func TestFlagsCanceledContext(t *testing.T) {
	t.Parallel()
	f := gatetest.NewFlags()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, f.SetFlag(ctx, gate.Flag{SessionKey: "s", Name: "n"}), context.Canceled)
	_, _, err := f.GetFlag(ctx, "s", "", "n")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, f.ClearFlag(ctx, "s", "", "n"), context.Canceled)
	require.ErrorIs(t, f.SetFlag(t.Context(), gate.Flag{Name: "n"}), gatetest.ErrInvalid)
}

func TestFlagsAll(t *testing.T) {
	t.Parallel()
	f := gatetest.NewFlags()
	until := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, fl := range []gate.Flag{
		{SessionKey: "b", Name: "x", Until: until},
		{SessionKey: "a", Subject: "u", Name: "y"},
		{SessionKey: "a", Name: "z"},
	} {
		require.NoError(t, f.SetFlag(t.Context(), fl))
	}
	all := f.All()
	require.Len(t, all, 3)
	require.Equal(t, []string{"a/", "a/u", "b/"}, []string{
		all[0].SessionKey + "/" + all[0].Subject, all[1].SessionKey + "/" + all[1].Subject, all[2].SessionKey + "/" + all[2].Subject,
	})
}
