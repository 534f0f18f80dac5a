package feishu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// bookkeepingTimeout bounds work done after Run's context ended (the
// final state report).
const bookkeepingTimeout = 5 * time.Second

// Run learns the bot (a tenant access token, then the bot info API for
// the bot's open_id, which becomes Event.BotID), then receives events
// until ctx ends:
//
//   - ModeWebhook: the Channel's ServeHTTP delivers what Feishu posts;
//     Run probes the bot info API every HealthInterval for health.
//   - ModeWebSocket: Run asks for a long-connection endpoint with AppID
//     and AppSecret, dials it, pings every PingInterval (or the server's
//     interval), hands each event to sink.HandleEvent and acknowledges
//     the frame only after HandleEvent returned (code 200; 500 when it
//     failed, so that Feishu delivers it again), and reconnects with
//     backoff when the connection ends.
//
// Run reports Connected and Online to the sink once the bot is known
// (webhook) or the long connection is up, and offline after
// OfflineAfter failed probes or when the connection drops; retries wait
// RetryMin doubling to RetryMax with ±20 % jitter on Config.Clock. It
// returns nil when ctx ends, an error wrapping ErrUnauthorized when the
// platform refuses the credentials, an error when the bot info is
// refused for good (the app has no bot capability), and ErrRunning when
// another Run is active.
func (c *Channel) Run(ctx context.Context, sink channel.Sink) error {
	if sink == nil {
		return errors.New("feishu: Run with a nil sink")
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	r := &runner{c: c, sink: sink}
	defer r.stop(ctx)

	if err := r.learnBot(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var err error
	if c.cfg.Mode == ModeWebSocket {
		err = r.longConnection(ctx)
	} else {
		err = r.webhook(ctx)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// runner is the state of one Run.
type runner struct {
	c     *Channel
	sink  channel.Sink
	botID string

	reported bool
	online   bool
	fails    int // consecutive failures (probes, connection attempts)
}

func (r *runner) report(ctx context.Context, up bool, reason string) {
	if r.reported && r.online == up {
		return
	}
	r.reported, r.online = true, up
	r.c.offline.Store(!up)
	lvl := slog.LevelInfo
	if !up {
		lvl = slog.LevelWarn
	}
	r.c.log.Log(ctx, lvl, "feishu_state", "online", up, "reason", reason)
	r.sink.ReportState(ctx, channel.State{Platform: Platform, BotID: r.botID, Connected: up, Online: up, Reason: reason})
}

func (r *runner) succeeded(ctx context.Context, reason string) {
	r.fails = 0
	r.report(ctx, true, reason)
}

func (r *runner) failed(ctx context.Context, what string, err error) {
	r.fails++
	if r.fails >= r.c.cfg.OfflineAfter {
		r.report(ctx, false, fmt.Sprintf("%s failed %d times: %v", what, r.fails, err))
	}
}

// stop runs when Run returns: the webhook stops delivering, Send stops
// failing fast, and the sink hears that the channel is down.
func (r *runner) stop(ctx context.Context) {
	r.c.active.Store(nil)
	r.c.offline.Store(false)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	r.c.log.Info("feishu_state", "online", false, "reason", "stopped")
	r.sink.ReportState(sctx, channel.State{Platform: Platform, BotID: r.botID, Reason: "stopped"})
}

// sleep waits d on the configured clock; false when ctx ended first.
func (r *runner) sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(r.c.clk, ctx.Done(), d)
}

// backoff is the n-th (1-based) retry delay: RetryMin doubling to
// RetryMax, times a jitter factor in [0.8, 1.2).
func (c *Channel) backoff(n int) time.Duration {
	d := c.cfg.RetryMin
	for i := 1; i < n && d < c.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.RetryMax)
	return time.Duration(float64(d) * (0.8 + 0.4*c.jitter()))
}

// retryDelay is the wait after a failed call: the backoff, or the
// platform's rate-limit reset when that is longer.
func (c *Channel) retryDelay(n int, err error) time.Duration {
	d := c.backoff(n)
	var ae *APIError
	if errors.As(err, &ae) && ae.RetryAfter > d {
		d = ae.RetryAfter
	}
	return d
}

// botInfo is the bot info API's bot object.
type botInfo struct {
	OpenID  string `json:"open_id"`
	AppName string `json:"app_name"`
}

// fetchBot asks the bot info API (GET /open-apis/bot/v3/info), which
// puts "bot" beside "code" (some gateways nest it under "data").
func (c *Channel) fetchBot(ctx context.Context) (botInfo, error) {
	env, err := c.call(ctx, request{op: "bot_info", method: http.MethodGet, path: "/open-apis/bot/v3/info"}, nil)
	if err != nil {
		return botInfo{}, err
	}
	var a struct {
		Bot  *botInfo `json:"bot"`
		Data struct {
			Bot *botInfo `json:"bot"`
		} `json:"data"`
	}
	_ = json.Unmarshal(env.raw, &a) // the envelope already parsed
	b := a.Bot
	if b == nil {
		b = a.Data.Bot
	}
	if b == nil || !validID(b.OpenID) {
		return botInfo{}, errors.New("feishu: bot_info: the answer has no valid bot open_id")
	}
	return *b, nil
}

// learnBot retries until the bot is known, ctx ends or the platform
// refuses for good.
func (r *runner) learnBot(ctx context.Context) error {
	c := r.c
	for {
		b, err := c.fetchBot(ctx)
		if err == nil {
			r.botID = b.OpenID
			c.mu.Lock()
			c.botID = b.OpenID
			c.mu.Unlock()
			c.log.Info("feishu_bot", "bot_id", b.OpenID, "app_name", b.AppName, "mode", string(c.cfg.Mode))
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrUnauthorized) {
			c.log.Error("feishu_unauthorized", "op", "tenant_access_token", "err", err)
			return err
		}
		var ae *APIError
		if errors.As(err, &ae) && ae.Status/100 == 4 && ae.Code != 0 && channel.Classify(err) != channel.ClassRateLimited {
			c.log.Error("feishu_bot_info_refused", "err", err, "hint", "enable the bot capability of the app and publish a version")
			return fmt.Errorf("feishu: the bot info API refused the app: %w", err)
		}
		c.log.Warn("feishu_bot_info_failed", "err", err)
		r.failed(ctx, "bot info", err)
		if !r.sleep(ctx, c.retryDelay(r.fails, err)) {
			return ctx.Err()
		}
	}
}

// webhook marks the handler active and probes the Open API for health
// until ctx ends.
func (r *runner) webhook(ctx context.Context) error {
	c := r.c
	c.active.Store(&activeRun{sink: r.sink, botID: r.botID})
	r.succeeded(ctx, "webhook ready")
	for {
		d := c.cfg.HealthInterval
		if r.fails > 0 {
			d = min(d, c.backoff(r.fails))
		}
		if !r.sleep(ctx, d) {
			return nil
		}
		_, err := c.fetchBot(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			r.succeeded(ctx, "webhook healthy")
		case errors.Is(err, ErrUnauthorized):
			c.log.Error("feishu_unauthorized", "op", "tenant_access_token", "err", err)
			return err
		default:
			c.log.Warn("feishu_health_probe_failed", "err", err)
			r.failed(ctx, "bot info", err)
		}
	}
}
