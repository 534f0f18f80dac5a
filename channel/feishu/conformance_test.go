package feishu_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
)

type parallelHarness struct{ chantest.HarnessFunc }

func (parallelHarness) Parallel() bool { return true }

// conformanceGroup and conformanceUser have Feishu-shaped ids.
var (
	conformanceGroup = channel.Chat{Kind: channel.Group, ID: "oc_5ce6d572455d361153b7cb51da133945"}
	conformanceUser  = channel.Sender{ID: "ou_84aad35d084aa403a838cf73ee18467", Name: "Alice"}
)

// fastFake redelivers refused events after 20 ms (Feishu waits 15 s).
func fastFake(cfg feishutest.Config) feishutest.Config {
	cfg.RetryDelays = []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}
	return cfg
}

// fastRetry keeps the real-clock conformance runs quick: the suite waits
// for reconnects, it does not time them.
func fastRetry(cfg feishu.Config) feishu.Config {
	cfg.RetryMin = 5 * time.Millisecond
	cfg.RetryMax = 50 * time.Millisecond
	cfg.OfflineAfter = 1
	cfg.HealthInterval = 20 * time.Millisecond
	return cfg
}

func conformanceEnv(srv *feishutest.Server, ch *feishu.Channel) chantest.Env {
	return chantest.Env{
		Channel:  ch,
		Platform: srv,
		BotID:    srv.BotID(),
		Caps:     chantest.Capabilities{Redelivers: true, Offline: true, Reject: true, SendMentions: true},
		Group:    conformanceGroup,
		User:     conformanceUser,
	}
}

func TestConformanceWebhook(t *testing.T) {
	t.Parallel()
	for name, key := range map[string]string{"Plain": "", "Encrypted": "conformance encrypt key"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
				srv := feishutest.New(fastFake(feishutest.Config{EncryptKey: key}))
				t.Cleanup(srv.Close)
				ch, err := feishu.New(fastRetry(feishu.Config{
					AppID: srv.AppID(), AppSecret: srv.AppSecret(), BaseURL: srv.URL(),
					VerificationToken: srv.VerificationToken(), EncryptKey: key,
				}))
				require.NoError(t, err)
				hook := httptest.NewServer(ch)
				t.Cleanup(hook.Close)
				srv.SetCallback(hook.URL + "/feishu/events")
				return conformanceEnv(srv, ch)
			}})
		})
	}
}

func TestConformanceLongConnection(t *testing.T) {
	t.Parallel()
	chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
		srv := feishutest.New(fastFake(feishutest.Config{}))
		t.Cleanup(srv.Close)
		ch, err := feishu.New(fastRetry(feishu.Config{
			AppID: srv.AppID(), AppSecret: srv.AppSecret(), BaseURL: srv.URL(), Mode: feishu.ModeWebSocket,
		}))
		require.NoError(t, err)
		return conformanceEnv(srv, ch)
	}})
}
