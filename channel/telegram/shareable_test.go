package telegram_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/telegram"
)

// Only webhook mode may run in several processes at once: long polling is
// one client's.
func TestShareableOnlyInWebhookMode(t *testing.T) {
	t.Parallel()
	shareable := func(cfg telegram.Config) bool {
		cfg.Token = "987654:SECRET-never-shown"
		ch, err := telegram.New(cfg)
		require.NoError(t, err)
		s, ok := channel.As[channel.Shareable](ch)
		return ok && s.Shareable()
	}
	require.True(t, shareable(telegram.Config{Mode: telegram.ModeWebhook, Webhook: telegram.WebhookConfig{SecretToken: "s3cret"}}))
	require.False(t, shareable(telegram.Config{Mode: telegram.ModePolling}))
}
