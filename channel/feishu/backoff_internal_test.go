package feishu

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBackoff: 1 s doubling to 60 s, each delay within ±20 %; a
// rate-limit reset longer than the backoff wins.
func TestBackoff(t *testing.T) {
	t.Parallel()
	c, err := New(Config{AppID: "cli_1", AppSecret: "s", Mode: ModeWebSocket})
	require.NoError(t, err)
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for _, j := range []float64{0, 0.5, 0.999999} {
		c.jitter = func() float64 { return j }
		for i, w := range want {
			d := c.backoff(i + 1)
			base := w * time.Second
			require.InDelta(t, float64(base)*(0.8+0.4*j), float64(d), float64(time.Millisecond), "attempt %d, jitter %v", i+1, j)
			require.GreaterOrEqual(t, d, time.Duration(float64(base)*0.8))
			require.Less(t, d, time.Duration(float64(base)*1.2))
		}
	}
	c.jitter = func() float64 { return 0.5 }
	limited := newAPIError("send", 429, codeRateLimited, "", 90*time.Second, false)
	require.Equal(t, 90*time.Second, c.retryDelay(1, limited))
	require.Equal(t, time.Second, c.retryDelay(1, newAPIError("send", 500, 0, "", 0, false)))
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := New(Config{})
	require.ErrorContains(t, err, "AppID is required")
	require.ErrorContains(t, err, "AppSecret is required")
	require.ErrorContains(t, err, "VerificationToken is required in webhook mode")
	_, err = New(Config{AppID: "cli 1", AppSecret: "topsecret", Mode: "poll", BaseURL: "ftp://x", RetryMin: time.Minute, RetryMax: time.Second, CallTimeout: -1})
	for _, want := range []string{"AppID", "Mode", "BaseURL", "RetryMax", "CallTimeout is negative"} {
		require.ErrorContains(t, err, want)
	}
	require.NotContains(t, err.Error(), "topsecret")
	c, err := New(Config{AppID: "cli_1", AppSecret: "s", VerificationToken: "t", BaseURL: LarkBaseURL + "/"})
	require.NoError(t, err)
	require.Equal(t, LarkBaseURL, c.cfg.BaseURL)
	require.Equal(t, ModeWebhook, c.cfg.Mode)
	require.Equal(t, DefaultCallTimeout, c.cfg.CallTimeout)
	require.Equal(t, DefaultReplayWindow, c.cfg.ReplayWindow)
	require.Equal(t, "feishu", c.Name())
	require.Equal(t, MaxTextRunes, c.TextLimit().Max)
}
