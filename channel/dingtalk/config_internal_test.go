package dingtalk

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := New(Config{ClientID: "dingabc", ClientSecret: "s3cr3t-value"})
	require.NoError(t, err)
	cfg := c.cfg
	require.Equal(t, DefaultAPIBase, cfg.APIBase)
	require.Equal(t, DefaultWebhookBase, cfg.WebhookBase)
	require.Equal(t, "dingabc", cfg.RobotCode)
	require.Equal(t, DefaultCallTimeout, cfg.CallTimeout)
	require.Equal(t, time.Second, cfg.RetryMin)
	require.Equal(t, time.Minute, cfg.RetryMax)
	require.Equal(t, DefaultKeepAlive, cfg.KeepAlive)
	require.Equal(t, DefaultPongTimeout, cfg.PongTimeout)
	require.Equal(t, int64(DefaultMaxFrameBytes), cfg.MaxFrameBytes)
	require.Equal(t, DefaultBacklog, cfg.Backlog)
	require.NotNil(t, cfg.HTTPClient)
	require.NotSame(t, http.DefaultClient, cfg.HTTPClient)
	require.NotNil(t, cfg.Clock)
	require.NotNil(t, cfg.Logger)

	c, err = New(Config{ClientID: "dingabc", ClientSecret: "x1234", APIBase: "http://127.0.0.1:8080/", RobotCode: "robot"})
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:8080", c.cfg.APIBase)
	require.Equal(t, "http://127.0.0.1:8080", c.cfg.WebhookBase, "a custom API serves the webhooks too")
	require.Equal(t, "robot", c.BotID())

	c, err = New(Config{ClientID: "dingabc", ClientSecret: "x1234", APIBase: "https://api.dingtalk.com/"})
	require.NoError(t, err)
	require.Equal(t, DefaultWebhookBase, c.cfg.WebhookBase)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	const secret = "very-secret-value-123"
	for name, cfg := range map[string]Config{
		"no client id":      {ClientSecret: secret},
		"bad client id":     {ClientID: "a b", ClientSecret: secret},
		"no secret":         {ClientID: "ding"},
		"secret with space": {ClientID: "ding", ClientSecret: "a " + secret},
		"robot with colon":  {ClientID: "ding", ClientSecret: secret, RobotCode: "$:LWCP"},
		"api not http":      {ClientID: "ding", ClientSecret: secret, APIBase: "ftp://x"},
		"api with query":    {ClientID: "ding", ClientSecret: secret, APIBase: "https://x/?a=1"},
		"webhook with path": {ClientID: "ding", ClientSecret: secret, WebhookBase: "https://x/robot"},
		"client timeout":    {ClientID: "ding", ClientSecret: secret, HTTPClient: &http.Client{Timeout: time.Second}},
		"negative duration": {ClientID: "ding", ClientSecret: secret, CallTimeout: -1},
		"retry order":       {ClientID: "ding", ClientSecret: secret, RetryMin: time.Minute, RetryMax: time.Second},
		"negative frame":    {ClientID: "ding", ClientSecret: secret, MaxFrameBytes: -1},
		"negative backlog":  {ClientID: "ding", ClientSecret: secret, Backlog: -1},
	} {
		_, err := New(cfg)
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "dingtalk: invalid config", name)
		require.NotContains(t, err.Error(), secret, name)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	c, err := New(Config{ClientID: "ding", ClientSecret: "secret"})
	require.NoError(t, err)
	for _, j := range []float64{0, 0.5, 0.999999} {
		c.jitter = func() float64 { return j }
		for n, base := range []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60} {
			d := c.backoff(n + 1)
			require.GreaterOrEqual(t, d, base*time.Second*8/10)
			require.Less(t, d, base*time.Second*12/10)
		}
	}
	c.jitter = func() float64 { return 0.5 }
	require.Equal(t, time.Second, c.backoff(1))
	require.Equal(t, time.Minute, c.backoff(100))
}

func TestSessionsAndQuotes(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	var s, ss sessions
	ss.put(groupChat("a"), webhook{url: "u1", expires: now.Add(time.Hour)}, now)
	ss.put(groupChat("a"), webhook{url: "u0", expires: now.Add(time.Minute)}, now) // older: ignored
	w, ok := ss.get(groupChat("a"), now, time.Minute)
	require.True(t, ok)
	require.Equal(t, "u1", w.url)
	_, ok = ss.get(groupChat("a"), now.Add(59*time.Minute), time.Minute)
	require.False(t, ok, "within the margin of the expiry")
	ss.drop(groupChat("a"), "other")
	_, ok = ss.get(groupChat("a"), now, time.Minute)
	require.True(t, ok, "dropping another URL keeps it")
	ss.drop(groupChat("a"), "u1")
	_, ok = ss.get(groupChat("a"), now, time.Minute)
	require.False(t, ok)

	// Bounded: expired entries go first, then the soonest to expire.
	for i := range maxSessions {
		s.put(groupChat(itoa(i)), webhook{url: "u", expires: now.Add(time.Duration(i+1) * time.Second)}, now)
	}
	s.put(groupChat("new"), webhook{url: "u", expires: now.Add(time.Hour)}, now)
	require.Len(t, s.m, maxSessions)
	_, ok = s.m[groupChat("0")]
	require.False(t, ok, "the soonest to expire was evicted")
	s.put(groupChat("newer"), webhook{url: "u", expires: now.Add(time.Hour)}, now.Add(10*time.Second))
	require.LessOrEqual(t, len(s.m), maxSessions-8, "expired entries were dropped")

	var q quotes
	for i := range maxQuotes + 10 {
		q.put(itoa(i), quote{text: "t"})
	}
	require.Len(t, q.m, maxQuotes)
	_, ok = q.get("0")
	require.False(t, ok)
	_, ok = q.get(itoa(maxQuotes + 9))
	require.True(t, ok)
	q.put("empty", quote{})
	_, ok = q.get("empty")
	require.False(t, ok)

	require.Equal(t, "https://oapi.dingtalk.com/robot/sendBySession?session=a",
		sessionURL("https://oapi.dingtalk.com/robot/sendBySession?session=a", DefaultWebhookBase))
	for _, bad := range []string{"http://oapi.dingtalk.com/robot", "https://evil.example/robot", "https://user@oapi.dingtalk.com/x",
		"https://oapi.dingtalk.com.evil.example/x", "::", ""} {
		require.Empty(t, sessionURL(bad, DefaultWebhookBase), bad)
	}
}

func TestSecretSet(t *testing.T) {
	t.Parallel()
	var s secretSet
	s.pin("the-client-secret")
	s.add("ab") // too short to redact
	s.addURL("https://oapi.dingtalk.com/robot/sendBySession?session=abcdef123456")
	require.Equal(t, "x <redacted> y ab <redacted>", s.scrub("x the-client-secret y ab abcdef123456"))
	for i := range maxSecrets + 5 {
		s.add("secret-number-" + itoa(i))
	}
	require.Len(t, s.list, maxSecrets)
	require.Equal(t, "<redacted>", s.scrub("the-client-secret"), "the pinned secret stays")
}

func groupChat(id string) channel.Chat { return channel.Chat{Kind: channel.Group, ID: id} }

func itoa(i int) string { return strconv.Itoa(i) }
