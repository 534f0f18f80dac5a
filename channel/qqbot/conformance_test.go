package qqbot_test

import (
	"testing"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
)

type parallelHarness struct{ chantest.HarnessFunc }

func (parallelHarness) Parallel() bool { return true }

// conformanceGroup is a guild text channel: the platform's docs define
// quotes (message_reference) and mentions ("<@id>") for guild messages
// only, and the suite checks both in its group. The private chat is a C2C
// chat. QQ groups are covered by this package's own tests.
var conformanceGroup = channel.Chat{Kind: channel.Group, ID: "channel:100200300"}

// conformanceEnv: the suite sends to chats with no message to reply to
// (its Send and ConcurrentSends checks), which the platform allows only
// for active messages; the fake allows them here and the adapter has
// ActiveMessages on. The passive-reply rules are tested on their own.
func conformanceEnv(srv *qqbottest.Server, ch *qqbot.Channel) chantest.Env {
	return chantest.Env{
		Channel:  ch,
		Platform: srv,
		BotID:    srv.AppID(),
		Caps:     chantest.Capabilities{Redelivers: true, Offline: true, Reject: true, SendMentions: true},
		Group:    conformanceGroup,
	}
}

func TestConformanceGateway(t *testing.T) {
	t.Parallel()
	chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
		srv := newFake(t, qqbottest.Config{AllowActive: true})
		ch := newChannel(t, srv, func(c *qqbot.Config) { c.ActiveMessages = true })
		return conformanceEnv(srv, ch)
	}})
}

func TestConformanceWebhook(t *testing.T) {
	t.Parallel()
	chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
		srv := newFake(t, qqbottest.Config{AllowActive: true})
		ch := newChannel(t, srv, func(c *qqbot.Config) { c.ActiveMessages = true; c.Mode = qqbot.ModeWebhook })
		serveWebhook(t, srv, ch)
		return conformanceEnv(srv, ch)
	}})
}

func TestConformanceGatewayStateDir(t *testing.T) {
	t.Parallel()
	chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
		srv := newFake(t, qqbottest.Config{AllowActive: true})
		ch := newChannel(t, srv, func(c *qqbot.Config) { c.ActiveMessages = true; c.StateDir = t.TempDir() })
		return conformanceEnv(srv, ch)
	}})
}
