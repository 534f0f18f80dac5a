package onebot_test

import (
	"testing"

	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
)

// parallelHarness runs the conformance subtests in parallel: every
// environment has its own fake and loopback ports.
type parallelHarness struct{ chantest.HarnessFunc }

func (parallelHarness) Parallel() bool { return true }

// TestConformance runs the chantest suite for each transport against the
// onebottest fake, with every capability the fake supports.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
				r := tr.build(t, onebottest.Config{AccessToken: "conformance-token"}, onebot.Config{AccessToken: "conformance-token"})
				return chantest.Env{
					Channel:  r.ch,
					Platform: r.fake,
					BotID:    r.fake.BotID(),
					Caps:     chantest.Capabilities{Redelivers: true, Offline: true, Reject: true, SendMentions: true},
				}
			}})
		})
	}
}
