package wecom_test

import (
	"testing"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/wecom"
	"github.com/personakit/persona/channel/wecom/wecomtest"
)

// parallelHarness runs the conformance subtests in parallel: every
// environment has its own fake on its own loopback port.
type parallelHarness struct{ chantest.HarnessFunc }

func (parallelHarness) Parallel() bool { return true }

// TestConformance runs the chantest suite against the AI bot's long
// connection: the one WeCom transport that has group and private chats
// and lets the bot write on its own (an app gets private messages only;
// an AI bot's callbacks can only be answered). See TestAppDuties and
// TestAIBotCallbackDuties for the other modes.
func TestConformance(t *testing.T) {
	t.Parallel()
	chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
		e := newEnv(t, wecomtest.ModeAIBotWS, nil, func(c *wecom.Config) { c.OfflineAfter = 1 })
		// The suite writes to its group and user first; an AI bot may
		// only write to chats that talked to it before.
		e.srv.KnowChat(chantest.DefaultGroup)
		e.srv.KnowChat(channel.Chat{Kind: channel.Private, ID: chantest.DefaultUser.ID})
		return chantest.Env{
			Channel:  e.ch,
			Platform: e.srv,
			BotID:    e.srv.BotID(),
			Caps:     chantest.Capabilities{Redelivers: true, Offline: true, Reject: true},
		}
	}})
}
