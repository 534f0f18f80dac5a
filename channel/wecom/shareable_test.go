package wecom_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/wecom/wecomtest"
)

// Only a self-built app may run in several processes at once: an AI bot's
// streams live in the process that answered the callback, and its long
// connection is one client's.
func TestShareableOnlyAsAnApp(t *testing.T) {
	t.Parallel()
	require.True(t, newEnv(t, wecomtest.ModeApp, nil, nil).ch.Shareable())
	require.False(t, newEnv(t, wecomtest.ModeAIBot, nil, nil).ch.Shareable())
	require.False(t, newEnv(t, wecomtest.ModeAIBotWS, nil, nil).ch.Shareable())
}
