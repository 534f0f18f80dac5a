package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// bookkeepingTimeout bounds work done after Run's context ended (the final
// state report, saving an offset for an event already accepted, shutting
// the webhook server down).
const bookkeepingTimeout = 5 * time.Second

// Run learns the bot with getMe, then receives updates until ctx ends:
// by long polling getUpdates (ModePolling) or through the webhook handler
// (ModeWebhook, after setWebhook when WebhookConfig.URL is set). Each
// update's events are handed to sink.HandleEvent in order; in polling mode
// the offset advances (and is saved to the OffsetStore) only after every
// event of the update was accepted, and a refused event is fetched again
// after a backoff.
//
// Run reports Connected and Online to the sink once getMe succeeded, and
// offline after OfflineAfter consecutive failed polls (or webhook health
// probes); it retries with backoff (RetryMin doubling to RetryMax, ±20 %
// jitter, on Config.Clock) and reports online again on the first success.
// It returns nil when ctx ends, an error wrapping ErrUnauthorized when the
// Bot API refuses the token, an error for a definitive setWebhook
// rejection or a webhook listener failure, and ErrRunning when another Run
// is active.
func (c *Channel) Run(ctx context.Context, sink channel.Sink) error {
	if sink == nil {
		return errors.New("telegram: Run with a nil sink")
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	r := &runner{c: c, sink: sink}
	defer r.stop(ctx)

	if err := r.getMe(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var err error
	if c.cfg.Mode == ModeWebhook {
		err = r.webhook(ctx)
	} else {
		err = r.poll(ctx)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// runner is the state of one Run.
type runner struct {
	c    *Channel
	sink channel.Sink
	bot  botInfo

	reported bool
	online   bool
	fails    int // consecutive failed polls or probes
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
	r.c.log.Log(ctx, lvl, "telegram_state", "online", up, "reason", reason)
	r.sink.ReportState(ctx, channel.State{
		Platform: Platform, BotID: r.bot.idStr, Connected: up, Online: up, Reason: reason,
	})
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
	r.c.log.Info("telegram_state", "online", false, "reason", "stopped")
	r.sink.ReportState(sctx, channel.State{Platform: Platform, BotID: r.bot.idStr, Reason: "stopped"})
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

// retryDelay is the wait after a failed call: the backoff, or the Bot
// API's retry_after when that is longer.
func (c *Channel) retryDelay(n int, err error) time.Duration {
	d := c.backoff(n)
	var ae *APIError
	if errors.As(err, &ae) && ae.RetryAfter > d {
		d = ae.RetryAfter
	}
	return d
}

// getMe retries until the bot is known, ctx ends or the token is refused.
func (r *runner) getMe(ctx context.Context) error {
	c := r.c
	for {
		var u struct {
			tgUser
			CanReadAllGroupMessages bool `json:"can_read_all_group_messages"`
		}
		err := c.call(ctx, "getMe", struct{}{}, c.cfg.CallTimeout, &u)
		if err == nil && !validUserID(u.ID) {
			err = fmt.Errorf("telegram: getMe: the result has %s", idProblem("id", u.ID, "not a positive user id of at most 52 bits"))
		}
		if err == nil {
			r.bot = newBotInfo(u.tgUser)
			c.mu.Lock()
			c.bot = r.bot
			c.mu.Unlock()
			// With privacy mode on, groups deliver only commands, mentions
			// and replies to the bot (BotFather /setprivacy).
			c.log.Info("telegram_bot", "bot_id", r.bot.idStr, "username", u.Username,
				"privacy_mode", !u.CanReadAllGroupMessages)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrUnauthorized) {
			c.log.Error("telegram_unauthorized", "method", "getMe", "err", err)
			return err
		}
		c.log.Warn("telegram_getme_failed", "err", err)
		r.failed(ctx, "getMe", err)
		if !r.sleep(ctx, c.retryDelay(r.fails, err)) {
			return ctx.Err()
		}
	}
}

// poll is the long-polling loop.
func (r *runner) poll(ctx context.Context) error {
	c := r.c
	var offset int64
	switch off, ok, err := c.store.LoadOffset(ctx, r.bot.idStr); {
	case err != nil:
		c.log.Warn("telegram_offset_load_failed", "err", err,
			"effect", "polling from Telegram's first unconfirmed update")
	case ok:
		offset = off
	}
	r.succeeded(ctx, "polling")
	nacks := 0
	for {
		timeout := c.cfg.PollTimeout
		if !r.online {
			timeout = 0 // a short poll notices the recovery at once
		}
		raws, err := r.getUpdates(ctx, offset, timeout)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, ErrUnauthorized) {
				c.log.Error("telegram_unauthorized", "method", "getUpdates", "err", err)
				return err
			}
			var ae *APIError
			if errors.As(err, &ae) && ae.Code == http.StatusConflict {
				c.log.Error("duplicate_client_conflict", "err", err,
					"hint", "another getUpdates client or a webhook is active for this bot")
			} else {
				c.log.Warn("telegram_poll_failed", "err", err)
			}
			r.failed(ctx, "getUpdates", err)
			if !r.sleep(ctx, c.retryDelay(r.fails, err)) {
				return nil
			}
			continue
		}
		r.succeeded(ctx, "polling")
		var stalled bool
		offset, stalled = r.deliver(ctx, raws, offset)
		if ctx.Err() != nil {
			return nil
		}
		if !stalled {
			nacks = 0
			continue
		}
		nacks++
		if !r.sleep(ctx, c.backoff(nacks)) {
			return nil
		}
	}
}

func (r *runner) getUpdates(ctx context.Context, offset int64, timeout time.Duration) ([]json.RawMessage, error) {
	p := map[string]any{
		"timeout":         int(timeout / time.Second),
		"limit":           100,
		"allowed_updates": r.c.cfg.AllowedUpdates,
	}
	if offset != 0 {
		p["offset"] = offset
	}
	var res []json.RawMessage
	err := r.c.call(ctx, "getUpdates", p, timeout+r.c.cfg.CallTimeout, &res)
	return res, err
}

// deliver hands a batch to the sink in order and returns the new offset.
// It stops at the first refused event (stalled: the caller backs off and
// polls the same offset again). An update whose id cannot be read is
// skipped; if nothing after it advances the offset, the batch counts as
// stalled too, so a broken server cannot make the loop spin.
func (r *runner) deliver(ctx context.Context, raws []json.RawMessage, offset int64) (int64, bool) {
	c := r.c
	broken := false
	for _, raw := range raws {
		d, err := r.bot.decodeUpdate(raw, c.clk.Now())
		if err != nil {
			c.log.Error("telegram_update_malformed", "err", err, "bytes", len(raw))
			broken = true
			continue
		}
		c.logSkip(d)
		c.rememberUsers(d.users)
		for _, ev := range d.events {
			if err := r.sink.HandleEvent(ctx, ev); err != nil {
				c.log.Warn("telegram_event_nacked", "update_id", d.updateID, "chat", ev.Chat.String(),
					"message_id", ev.MessageID, "err", err, "effect", "not acknowledged; fetched again after a backoff")
				return offset, true
			}
		}
		offset = d.updateID + 1
		broken = false
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
		if err := c.store.SaveOffset(sctx, r.bot.idStr, offset); err != nil {
			c.log.Error("telegram_offset_save_failed", "offset", offset, "err", err,
				"effect", "a restart may re-read updates; the idempotent enqueue drops them")
		}
		cancel()
	}
	return offset, broken
}

// webhook serves the handler (on WebhookConfig.Addr when set) and probes
// the Bot API with getMe for health.
func (r *runner) webhook(ctx context.Context) error {
	c := r.c
	w := c.cfg.Webhook
	if w.URL != "" {
		if err := r.setWebhook(ctx); err != nil {
			return err
		}
	}
	c.active.Store(&activeRun{sink: r.sink, bot: r.bot})

	srvErr := make(chan error, 1)
	if w.Addr != "" {
		ln, err := net.Listen("tcp", w.Addr)
		if err != nil {
			return fmt.Errorf("telegram: webhook listener: %w", err)
		}
		addr := ln.Addr().String()
		c.addr.Store(&addr)
		defer c.addr.Store(nil)
		mux := http.NewServeMux()
		mux.Handle(w.Path, c)
		srv := &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
		}
		go func() { srvErr <- srv.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		c.log.Info("telegram_webhook_listening", "addr", addr, "path", w.Path)
	}
	r.succeeded(ctx, "webhook ready")

	for {
		d := c.cfg.HealthInterval
		if r.fails > 0 {
			d = min(d, c.backoff(r.fails))
		}
		t := c.clk.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case err := <-srvErr:
			t.Stop()
			return fmt.Errorf("telegram: webhook server: %w", err)
		case <-t.C():
		}
		var u tgUser
		err := c.call(ctx, "getMe", struct{}{}, c.cfg.CallTimeout, &u)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			r.succeeded(ctx, "webhook healthy")
		case errors.Is(err, ErrUnauthorized):
			c.log.Error("telegram_unauthorized", "method", "getMe", "err", err)
			return err
		default:
			c.log.Warn("telegram_health_probe_failed", "err", err)
			r.failed(ctx, "getMe", err)
		}
	}
}

// setWebhook registers the webhook, retrying transient failures.
func (r *runner) setWebhook(ctx context.Context) error {
	c := r.c
	w := c.cfg.Webhook
	p := map[string]any{
		"url":             w.URL,
		"secret_token":    w.SecretToken,
		"allowed_updates": c.cfg.AllowedUpdates,
	}
	if w.MaxConnections > 0 {
		p["max_connections"] = w.MaxConnections
	}
	for {
		err := c.call(ctx, "setWebhook", p, c.cfg.CallTimeout, nil)
		if err == nil {
			host := ""
			if u, err := url.Parse(w.URL); err == nil {
				host = u.Host
			}
			c.log.Info("telegram_webhook_set", "host", host) // the path may hold a secret
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrUnauthorized) || channel.Classify(err).Definitive() {
			return fmt.Errorf("telegram: setWebhook refused: %w", err)
		}
		c.log.Warn("telegram_set_webhook_failed", "err", err)
		r.failed(ctx, "setWebhook", err)
		if !r.sleep(ctx, c.retryDelay(r.fails, err)) {
			return ctx.Err()
		}
	}
}
