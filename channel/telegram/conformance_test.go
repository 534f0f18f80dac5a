package telegram_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
)

// conformanceGroup is a realistic supergroup id (Telegram group ids are
// negative); the fake reports it back as a group.
var conformanceGroup = channel.Chat{Kind: channel.Group, ID: "-100200300"}

type parallelHarness struct{ chantest.HarnessFunc }

func (parallelHarness) Parallel() bool { return true }

// fastRetry keeps the real-clock conformance runs quick: the suite waits
// for reconnects, it does not time them.
func fastRetry(cfg telegram.Config) telegram.Config {
	cfg.RetryMin = 5 * time.Millisecond
	cfg.RetryMax = 50 * time.Millisecond
	cfg.OfflineAfter = 1
	return cfg
}

func conformanceEnv(t *testing.T, srv *telegramtest.Server, ch *telegram.Channel) chantest.Env {
	t.Helper()
	srv.AddMember(-100200300, telegramtest.User{ID: 4242, FirstName: "Alice"}, "member")
	return chantest.Env{
		Channel:  ch,
		Platform: srv,
		BotID:    srv.BotID(),
		Caps:     chantest.Capabilities{Redelivers: true, Offline: true, Reject: true, SendMentions: true},
		Group:    conformanceGroup,
	}
}

func TestConformancePolling(t *testing.T) {
	t.Parallel()
	chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
		srv := telegramtest.New(telegramtest.Config{})
		t.Cleanup(srv.Close)
		ch, err := telegram.New(fastRetry(telegram.Config{Token: srv.Token(), APIBase: srv.URL()}))
		require.NoError(t, err)
		return conformanceEnv(t, srv, ch)
	}})
}

func TestConformancePollingRefusedConnections(t *testing.T) {
	t.Parallel()
	chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
		srv := telegramtest.New(telegramtest.Config{OfflineMode: telegramtest.OfflineRefuse})
		t.Cleanup(srv.Close)
		ch, err := telegram.New(fastRetry(telegram.Config{Token: srv.Token(), APIBase: srv.URL()}))
		require.NoError(t, err)
		return conformanceEnv(t, srv, ch)
	}})
}

func TestConformanceWebhook(t *testing.T) {
	t.Parallel()
	chantest.Conformance(t, parallelHarness{func(t *testing.T) chantest.Env {
		srv := telegramtest.New(telegramtest.Config{})
		t.Cleanup(srv.Close)
		var handler atomic.Pointer[telegram.Channel]
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handler.Load().ServeHTTP(w, r)
		}))
		t.Cleanup(hook.Close)
		ch, err := telegram.New(fastRetry(telegram.Config{
			Token: srv.Token(), APIBase: srv.URL(), Mode: telegram.ModeWebhook,
			HealthInterval: 20 * time.Millisecond,
			Webhook:        telegram.WebhookConfig{URL: hook.URL + "/telegram", SecretToken: "conformance-secret_1"},
		}))
		require.NoError(t, err)
		handler.Store(ch)
		return conformanceEnv(t, srv, ch)
	}})
}
