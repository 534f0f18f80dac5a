package dingtalk_test

import (
	"testing"
	"time"

	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
)

type parallelHarness struct{ chantest.HarnessFunc }

func (parallelHarness) Parallel() bool { return true }

// TestConformance runs the chantest suite against the dingtalktest fake.
// Mentions are not part of it: they reach DingTalk only through a
// conversation's session webhook, which a fresh conversation does not
// have yet (TestSendMentions covers them).
func TestConformance(t *testing.T) {
	t.Parallel()
	chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
		srv := dingtalktest.New(dingtalktest.Config{})
		t.Cleanup(srv.Close)
		ch, err := dingtalk.New(dingtalk.Config{ClientID: srv.ClientID(), ClientSecret: srv.ClientSecret(), APIBase: srv.URL(),
			RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return chantest.Env{
			Channel:  ch,
			Platform: srv,
			BotID:    srv.BotID(),
			Caps:     chantest.Capabilities{Redelivers: true, Offline: true, Reject: true},
		}
	}})
}
