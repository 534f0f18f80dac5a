package outbound_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outbound"
)

func TestMaskSecrets(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"configured value", "my key is hunter2hunter2!", "my key is [redacted]!"},
		{"openai key", "use sk-abcdefghijklmnop1234 please", "use [redacted] please"},
		{"github token", "ghp_" + "abcdefghijklmnopqrstuvwxyz0123", "[redacted]"},
		{"bearer", "Authorization: Bearer abcdefghijklmnopqrstuv", "Authorization: [redacted]"},
		{"key=value", "api_key=abc123 and password: 'p@ss word'", "api_key=[redacted] and password: [redacted]"},
		{"cookie", "Cookie: sid=abc; theme=dark", "Cookie: [redacted]"},
		{"private key", "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "[redacted]"},
		{"nothing secret", "the token ring is a network", "the token ring is a network"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, outbound.MaskSecrets(tc.in, []string{"hunter2hunter2", "", "ab"}))
		})
	}
}

func TestResolveMarkers(t *testing.T) {
	t.Parallel()
	known := func(id string) bool { return id == "h-1" }
	tests := []struct {
		name, in, text, reply string
	}{
		{"current message", "[persona-reply:m-1]hi", "hi", "m-1"},
		{"message in history", "[persona-reply:h-1]hi", "hi", "h-1"},
		{"unknown message dropped", "[persona-reply:x-9]hi", "hi", ""},
		{"first valid wins", "[persona-reply:x-9][persona-reply:h-1][persona-reply:m-1]hi", "hi", "h-1"},
		{"mentions are left to the exit", "[persona-at:u2] and [persona-at:u3] hi", "[persona-at:u2] and [persona-at:u3] hi", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			text, reply := outbound.ResolveMarkers(tc.in, "m-1", known)
			require.Equal(t, tc.text, text)
			require.Equal(t, tc.reply, reply)
		})
	}
}

func TestSendPolicy(t *testing.T) {
	t.Parallel()
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	p := channel.Chat{Kind: channel.Private, ID: "u1"}
	pol := outbound.SendPolicy{Rules: []outbound.PolicyRule{
		{Allow: true, SessionPrefix: "onebot:bot:group:vip"},
		{Allow: false, Platform: "onebot", Kind: channel.Group},
		{Allow: false, SessionPrefix: "telegram:bot:private:"},
	}}
	tests := []struct {
		name     string
		platform string
		chat     channel.Chat
		session  string
		allow    bool
		rule     int
	}{
		{"first rule allows", "onebot", g, "onebot:bot:group:vip1", true, 0},
		{"first deny wins", "onebot", g, "onebot:bot:group:g1", false, 1},
		{"kind does not match", "onebot", p, "onebot:bot:private:u1", true, -1},
		{"prefix deny", "telegram", p, "telegram:bot:private:u1", false, 2},
		{"default allows", "telegram", g, "telegram:bot:group:g1", true, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ok, rule := pol.Allowed(tc.platform, tc.chat, tc.session)
			require.Equal(t, tc.allow, ok)
			require.Equal(t, tc.rule, rule)
		})
	}
	pol2 := pol
	pol2.Override = func(k string) int {
		if k == "onebot:bot:group:g1" {
			return 1
		}
		return -1
	}
	ok, _ := pol2.Allowed("onebot", g, "onebot:bot:group:g1")
	require.True(t, ok, "owner override on")
	ok, _ = pol2.Allowed("telegram", g, "telegram:bot:group:g1")
	require.False(t, ok, "owner override off")
}
