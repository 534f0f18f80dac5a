package qqbot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/personakit/persona/channel"
)

// bookkeepingTimeout bounds work done after Run's context ended (the final
// state report, closing the connection).
const bookkeepingTimeout = 5 * time.Second

// Run receives events until ctx ends: from the WebSocket gateway
// (ModeGateway: GET /gateway, Hello, Identify or Resume, heartbeats) or
// through the webhook handler (ModeWebhook, with GET /users/@me as the
// health probe). Each message event is handed to sink.HandleEvent; the
// gateway's resume sequence advances, and is saved in Config.StateDir,
// only after it returned nil; a refused event closes the connection, and
// the resume after a backoff makes the platform deliver it again.
//
// Run reports Connected and Online to the sink on READY or RESUMED (webhook
// mode: once the probe succeeded) and offline when the connection drops
// (webhook mode: after OfflineAfter failed probes). It reconnects with
// backoff (RetryMin doubling to RetryMax, ±20 % jitter, on Config.Clock),
// resuming the session where the close code allows it and identifying
// anew where it does not.
//
// It returns nil when ctx ends; an error wrapping ErrUnauthorized when the
// platform refuses the credentials; a *GatewayError for a close code after
// which no reconnect can succeed (4010–4014 bad shard, version or
// intents; 4914 bot taken down; 4915 bot banned); and ErrRunning when
// another Run is active.
func (c *Channel) Run(ctx context.Context, sink channel.Sink) error {
	if sink == nil {
		return errors.New("qqbot: Run with a nil sink")
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	r := &runner{c: c, sink: sink}
	defer r.stop(ctx)
	var err error
	if c.cfg.Mode == ModeWebhook {
		err = r.webhook(ctx)
	} else {
		err = r.gateway(ctx)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// GatewayError is a gateway close code after which reconnecting cannot
// help: 4010–4014 (invalid shard, too many guilds, invalid version,
// invalid or unauthorised intents), 4914 (the bot was taken down; only
// the sandbox is allowed) and 4915 (the bot is banned).
type GatewayError struct {
	Code   int
	Reason string
}

// Error describes the close code.
func (e *GatewayError) Error() string {
	return fmt.Sprintf("qqbot: the gateway closed the connection with %d (%s); not reconnecting", e.Code, e.Reason)
}

// runner is the state of one Run.
type runner struct {
	c    *Channel
	sink channel.Sink

	reported bool
	online   bool
	fails    int // consecutive failed webhook probes
	// tooBig counts connections ended by a frame over the hard limit at
	// the resume sequence tooBigSeq.
	tooBig    int
	tooBigSeq int64
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
	r.c.log.Log(ctx, lvl, "qq_state", "online", up, "reason", reason)
	r.sink.ReportState(ctx, channel.State{Platform: Platform, BotID: r.c.cfg.AppID, Connected: up, Online: up, Reason: reason})
}

// stop runs when Run returns: Send stops failing fast, the webhook stops
// delivering, and the sink hears that the channel is down.
func (r *runner) stop(ctx context.Context) {
	r.c.active.Store(nil)
	r.c.offline.Store(false)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	r.c.log.Info("qq_state", "online", false, "reason", "stopped")
	r.sink.ReportState(sctx, channel.State{Platform: Platform, BotID: r.c.cfg.AppID, Reason: "stopped"})
}

// webhook marks the handler active and probes the OpenAPI (GET
// /users/@me, which also tells the bot's guild user id) every
// HealthInterval, sooner while failing.
func (r *runner) webhook(ctx context.Context) error {
	c := r.c
	sink := r.sink
	c.active.Store(&sink)
	for {
		var u qqUser
		err := c.call(ctx, http.MethodGet, "/users/@me", nil, false, &u)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			c.setUserID(string(u.ID))
			r.fails = 0
			r.report(ctx, true, "webhook ready")
		case errors.Is(err, ErrUnauthorized):
			c.log.Error("qq_unauthorized", "err", err)
			return err
		default:
			r.fails++
			c.log.Warn("qq_health_probe_failed", "err", err, "failures", r.fails)
			if r.fails >= c.cfg.OfflineAfter {
				r.report(ctx, false, fmt.Sprintf("GET /users/@me failed %d times: %v", r.fails, err))
			}
		}
		d := c.cfg.HealthInterval
		if r.fails > 0 {
			d = min(d, c.backoff(r.fails))
		}
		if !c.sleep(ctx, d) {
			return nil
		}
	}
}
