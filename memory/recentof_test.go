package memory_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/memory"
)

// plainHistory has Recent only; viewingHistory has RecentView as well.
type plainHistory struct{ memory.History }

func (plainHistory) Recent(context.Context, string, int) ([]memory.Entry, error) {
	return []memory.Entry{{Key: "copied"}}, nil
}

type viewingHistory struct{ plainHistory }

func (viewingHistory) RecentView(context.Context, string, int) ([]memory.Entry, error) {
	return []memory.Entry{{Key: "lent"}}, nil
}

func TestRecentOfPrefersTheView(t *testing.T) {
	t.Parallel()
	got, err := memory.RecentOf(t.Context(), plainHistory{}, "s", 5)
	require.NoError(t, err)
	require.Equal(t, "copied", got[0].Key)
	got, err = memory.RecentOf(t.Context(), viewingHistory{}, "s", 5)
	require.NoError(t, err)
	require.Equal(t, "lent", got[0].Key)
}
