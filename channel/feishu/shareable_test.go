package feishu_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
)

// Only event callbacks may run in several processes at once: the long
// connection is one client's.
func TestShareableOnlyInWebhookMode(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	require.True(t, newChannel(t, srv, feishu.ModeWebhook, nil).Shareable())
	require.False(t, newChannel(t, srv, feishu.ModeWebSocket, nil).Shareable())
}
