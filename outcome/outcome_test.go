package outcome_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/outcome"
)

func TestCode(t *testing.T) {
	t.Parallel()
	for code, ok := range map[outcome.Code]bool{
		"replied": true, "ignored_stale": true, "notice_poke": true, "a1_b": true,
		"": false, "Replied": false, "_x": false, "1x": false, "ignored-stale": false, "ignored stale": false,
	} {
		require.Equal(t, ok, code.Valid(), "%q", code)
	}
	require.True(t, outcome.Replied.Replied())
	require.True(t, outcome.RepliedFallback.Replied())
	require.False(t, outcome.IgnoredGenerationFailed.Replied())
	require.Equal(t, outcome.NoticePoke, outcome.Notice("poke"))
	require.Equal(t, "replied", outcome.Replied.String())
}
