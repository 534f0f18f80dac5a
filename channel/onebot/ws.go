package onebot

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/personakit/persona/channel"
)

// wsConn is one WebSocket connection to the implementation (either
// direction) with its pending API calls.
type wsConn struct {
	ws       *websocket.Conn
	remote   string
	done     chan struct{} // closed when the reader ended
	detached chan struct{} // closed when runConn let go of the connection
	err      error         // why the reader ended; read after done

	mu      sync.Mutex
	pending map[string]chan response
	closing sync.Once
}

func newWSConn(ws *websocket.Conn, remote string) *wsConn {
	return &wsConn{ws: ws, remote: remote, done: make(chan struct{}), detached: make(chan struct{}), pending: map[string]chan response{}}
}

func (wc *wsConn) add(echo string) chan response {
	ch := make(chan response, 1)
	wc.mu.Lock()
	wc.pending[echo] = ch
	wc.mu.Unlock()
	return ch
}

func (wc *wsConn) remove(echo string) {
	wc.mu.Lock()
	delete(wc.pending, echo)
	wc.mu.Unlock()
}

// resolve hands a response to its waiting call; false when none waits.
func (wc *wsConn) resolve(echo string, r response) bool {
	wc.mu.Lock()
	ch, ok := wc.pending[echo]
	delete(wc.pending, echo)
	wc.mu.Unlock()
	if ok {
		ch <- r
	}
	return ok
}

func (wc *wsConn) pendingCount() int {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return len(wc.pending)
}

// close starts a close handshake without waiting for it.
func (wc *wsConn) close(reason string) {
	wc.closing.Do(func() {
		go func() { _ = wc.ws.Close(websocket.StatusGoingAway, reason) }()
	})
}

// bearerToken extracts the token of an Authorization header ("Bearer x" or
// go-cqhttp's "Token x") or of the access_token query parameter.
func bearerToken(r *http.Request) (string, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
		if ok && (strings.EqualFold(scheme, "Bearer") || strings.EqualFold(scheme, "Token")) {
			return strings.TrimSpace(tok), true
		}
		return "", true // present but malformed: a wrong token
	}
	if q := r.URL.Query(); q.Has("access_token") {
		return q.Get("access_token"), true
	}
	return "", false
}

// checkToken answers 401 (no token) or 403 (wrong token) and reports false
// when the request is not authorised.
func (c *Channel) checkToken(w http.ResponseWriter, r *http.Request) bool {
	if c.cfg.AccessToken == "" {
		return true
	}
	tok, present := bearerToken(r)
	switch {
	case !present:
		c.log.Warn("auth_failed", "remote", r.RemoteAddr, "reason", "no access token")
		http.Error(w, "onebot: access token required", http.StatusUnauthorized)
		return false
	case subtle.ConstantTimeCompare([]byte(tok), []byte(c.cfg.AccessToken)) != 1:
		c.log.Warn("auth_failed", "remote", r.RemoteAddr, "reason", "wrong access token")
		http.Error(w, "onebot: wrong access token", http.StatusForbidden)
		return false
	}
	return true
}

// serveReverse accepts the implementation's reverse WebSocket and serves it
// until it closes.
func (c *Channel) serveReverse(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		c.log.Warn("bad_handshake", "remote", r.RemoteAddr, "reason", "not a WebSocket upgrade")
		http.Error(w, "onebot: expected a WebSocket handshake (reverse WebSocket endpoint)", http.StatusBadRequest)
		return
	}
	if !c.checkToken(w, r) {
		return
	}
	rawSelf := strings.TrimSpace(r.Header.Get("X-Self-ID"))
	selfID, ok := idText(rawSelf, false)
	if !ok {
		c.log.Warn("bad_handshake", "remote", r.RemoteAddr, "reason", "missing or invalid X-Self-ID", "x_self_id", rawSelf)
		http.Error(w, "onebot: X-Self-ID must be the bot's QQ number", http.StatusBadRequest)
		return
	}
	if role := r.Header.Get("X-Client-Role"); !strings.EqualFold(role, "Universal") {
		c.log.Warn("bad_handshake", "remote", r.RemoteAddr, "reason", "unsupported client role", "x_client_role", role)
		http.Error(w, "onebot: only the Universal client role is supported (go-cqhttp: use_universal_client: true)", http.StatusBadRequest)
		return
	}
	if known := c.self(); known != "" && known != selfID {
		c.log.Warn("self_id_mismatch", "remote", r.RemoteAddr, "x_self_id", selfID, "bot_id", known)
		http.Error(w, "onebot: this endpoint serves another account", http.StatusForbidden)
		return
	}
	switch c.reserve(r, selfID) {
	case reserveNotRunning:
		http.Error(w, "onebot: the adapter is not running", http.StatusServiceUnavailable)
		return
	case reserveConflict:
		http.Error(w, "onebot: a client for this account is already connected", http.StatusConflict)
		return
	}
	// reserve registered us with c.wg.
	defer c.wg.Done()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		c.mu.Lock()
		c.reserved = false
		c.mu.Unlock()
		c.log.Warn("bad_handshake", "remote", r.RemoteAddr, "err", err)
		return
	}
	ws.SetReadLimit(c.cfg.ReadLimit)
	c.learnSelfID(selfID)
	c.runConn(c.currentRunCtx(), newWSConn(ws, r.RemoteAddr))
}

func (c *Channel) currentRunCtx() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runCtx
}

type reserveResult int

const (
	reserveOK reserveResult = iota
	reserveNotRunning
	reserveConflict
)

// reserve claims the single connection slot for a new reverse client and
// registers it with c.wg. A second client for the account is refused
// (duplicate_client_conflict) unless the current connection no longer
// answers a ping, in which case it is replaced.
func (c *Channel) reserve(r *http.Request, selfID string) reserveResult {
	for try := 0; ; try++ {
		c.mu.Lock()
		if !c.running {
			c.mu.Unlock()
			return reserveNotRunning
		}
		if c.conn == nil && !c.reserved {
			c.reserved = true
			c.wg.Add(1)
			c.mu.Unlock()
			return reserveOK
		}
		old := c.conn
		c.mu.Unlock()
		if old == nil || try > 0 {
			break
		}
		pctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		err := old.ws.Ping(pctx)
		cancel()
		if err == nil {
			break
		}
		c.log.Warn("stale_connection_replaced", "remote", old.remote, "err", err)
		_ = old.ws.CloseNow()
		wait, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		select {
		case <-old.detached:
		case <-wait.Done():
		}
		cancel()
	}
	c.log.Warn("duplicate_client_conflict", "remote", r.RemoteAddr, "x_self_id", selfID)
	return reserveConflict
}

// runForward dials the implementation and redials with backoff until ctx
// ends.
func (c *Channel) runForward(ctx context.Context) {
	attempt := 0
	for ctx.Err() == nil {
		hdr := http.Header{}
		if c.cfg.AccessToken != "" {
			hdr.Set("Authorization", "Bearer "+c.cfg.AccessToken)
		}
		// The handshake is bounded by the call timeout (wall clock: it is
		// network I/O); the established connection outlives dctx.
		dctx, dcancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		ws, resp, err := websocket.Dial(dctx, c.cfg.URL, &websocket.DialOptions{HTTPClient: c.cfg.HTTPClient, HTTPHeader: hdr})
		dcancel()
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		if err == nil {
			ws.SetReadLimit(c.cfg.ReadLimit)
			c.mu.Lock()
			c.wg.Add(1)
			c.mu.Unlock()
			ok := c.runConn(ctx, newWSConn(ws, c.cfg.URL))
			c.wg.Done()
			if ok {
				attempt = 0
			}
		} else if ctx.Err() == nil {
			switch {
			case resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden):
				c.log.Error("auth_failed", "url", c.cfg.URL, "status", resp.StatusCode, "reason", "the implementation refused the access token")
			default:
				status := 0
				if resp != nil {
					status = resp.StatusCode
				}
				c.log.Warn("dial_failed", "url", c.cfg.URL, "status", status, "err", err)
			}
		}
		if ctx.Err() != nil {
			return
		}
		attempt++
		if !c.pause(ctx, c.backoff(attempt), slog.LevelInfo, "reconnect_scheduled", "attempt", attempt) {
			return
		}
	}
}

// runConn serves one established WebSocket: it starts the reader, makes it
// the API connection, learns the account and its status, reports the state
// and waits until the connection ends. It reports whether the connection
// got as far as being reported up.
func (c *Channel) runConn(ctx context.Context, wc *wsConn) bool {
	go c.readLoop(ctx, wc)

	c.mu.Lock()
	c.conn = wc
	c.reserved = false
	c.online = true
	c.mu.Unlock()
	c.log.Info("connection_opened", "remote", wc.remote)

	up := false
	if c.bootstrapWS(ctx, wc) {
		c.mu.Lock()
		if c.conn == wc {
			c.up = true
			up = true
		}
		c.mu.Unlock()
		if up {
			c.report("connected")
		}
	}

	select {
	case <-wc.done:
	case <-ctx.Done():
		wc.close("shutting down")
		<-wc.done
	}

	c.mu.Lock()
	if c.conn == wc {
		c.conn = nil
		c.up = false
		c.stopWatchdogLocked()
	}
	c.mu.Unlock()
	close(wc.detached)
	c.log.Info("disconnected", "remote", wc.remote, "err", wc.err)
	c.report("disconnected")
	return up
}

// bootstrapWS learns the account (get_login_info) and its status
// (get_status) over a new connection. It reports false when the connection
// must not be used.
func (c *Channel) bootstrapWS(ctx context.Context, wc *wsConn) bool {
	if err := c.loadLoginInfo(ctx); err != nil {
		if errors.Is(err, errSelfMismatch) {
			c.log.Error("self_id_mismatch", "remote", wc.remote, "err", err)
			wc.close("wrong account")
			return false
		}
		select {
		case <-wc.done:
			return false
		default:
		}
		c.log.Warn("login_info_failed", "remote", wc.remote, "err", err)
	}
	c.loadStatus(ctx)
	select {
	case <-wc.done:
		return false
	default:
		return true
	}
}

var errSelfMismatch = errors.New("onebot: the implementation serves another account")

// loadLoginInfo calls get_login_info and records the self id and nickname.
func (c *Channel) loadLoginInfo(ctx context.Context) error {
	data, err := c.call(ctx, "get_login_info", nil, c.cfg.CallTimeout)
	if err != nil {
		return err
	}
	var info struct {
		UserID   wireID        `json:"user_id"`
		Nickname lenientString `json:"nickname"`
	}
	if err := json.Unmarshal(data, &info); err != nil {
		return fmt.Errorf("onebot: get_login_info: %w", err)
	}
	id, err := info.UserID.qq("user_id", false)
	if err != nil {
		return fmt.Errorf("onebot: get_login_info: %w", err)
	}
	if !c.learnSelfID(id) {
		return fmt.Errorf("%w: get_login_info says %s, expected %s", errSelfMismatch, id, c.self())
	}
	c.mu.Lock()
	c.nickname = string(info.Nickname)
	c.mu.Unlock()
	return nil
}

// loadStatus calls get_status and records the account status; when the
// call fails the account is assumed online (heartbeats correct it).
func (c *Channel) loadStatus(ctx context.Context) {
	data, err := c.call(ctx, "get_status", nil, c.cfg.CallTimeout)
	if err != nil {
		c.log.Debug("get_status_failed", "err", err)
		return
	}
	var st wireStatus
	if json.Unmarshal(data, &st) != nil {
		return
	}
	c.mu.Lock()
	c.online = st.effective()
	c.mu.Unlock()
}

// readLoop reads frames until the connection fails or ctx ends; responses
// go to their calls, events to the delivery goroutine.
func (c *Channel) readLoop(ctx context.Context, wc *wsConn) {
	defer close(wc.done)
	// The reader's context outlives Run's so that shutdown can do a close
	// handshake; runConn closes the connection when ctx ends.
	rctx := context.WithoutCancel(ctx)
	for {
		typ, data, err := wc.ws.Read(rctx)
		if err != nil {
			wc.err = err
			switch {
			case errors.Is(err, websocket.ErrMessageTooBig):
				c.log.Error("frame_too_large", "remote", wc.remote, "limit", c.cfg.ReadLimit, "err", err)
			case websocket.CloseStatus(err) != -1:
				c.log.Info("connection_closed", "remote", wc.remote, "status", websocket.CloseStatus(err).String())
			default:
				c.log.Info("connection_failed", "remote", wc.remote, "err", err)
			}
			_ = wc.ws.CloseNow()
			return
		}
		if typ != websocket.MessageText && typ != websocket.MessageBinary {
			continue
		}
		c.handleFrame(ctx, wc, data)
	}
}

// handleFrame dispatches one WebSocket frame. Malformed frames are logged
// and skipped; the connection survives.
func (c *Channel) handleFrame(ctx context.Context, wc *wsConn, data []byte) {
	var head frameHead
	if err := json.Unmarshal(data, &head); err != nil {
		c.log.Warn("malformed_frame", "remote", wc.remote, "bytes", len(data), "err", err)
		return
	}
	if head.PostType == nil {
		if head.Echo == nil && head.Status == nil {
			c.log.Warn("unknown_frame", "remote", wc.remote, "bytes", len(data))
			return
		}
		var r response
		if err := json.Unmarshal(data, &r); err != nil {
			c.log.Warn("malformed_frame", "remote", wc.remote, "bytes", len(data), "err", err)
			return
		}
		echo := echoString(head.Echo)
		if !wc.resolve(echo, r) {
			c.log.Debug("unmatched_response", "echo", echo)
		}
		return
	}
	ev, ok := c.parseEvent(data, "websocket")
	if ok {
		c.enqueue(ctx, ev)
	}
}

// echoString returns an echo value as text: a JSON string's content, else
// the raw JSON.
func echoString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// wsCall makes one API call over the current WebSocket.
func (c *Channel) wsCall(ctx context.Context, action string, params any, timeout time.Duration) (response, error) {
	c.mu.Lock()
	wc := c.conn
	c.mu.Unlock()
	if wc == nil {
		return response{}, fmt.Errorf("onebot: %s: %w: no connection", action, channel.ErrOffline)
	}
	echo := "persona-" + strconv.FormatUint(c.echoSeq.Add(1), 10)
	frame, err := json.Marshal(request{Action: action, Params: params, Echo: echo})
	if err != nil {
		return response{}, fmt.Errorf("onebot: %s: %w", action, err)
	}
	ctx, cancel := c.withTimeout(ctx, timeout) // armed before the write
	defer cancel()
	ch := wc.add(echo)
	defer wc.remove(echo)
	// The write gets its own wall-clock deadline, detached from the call's
	// context: coder/websocket closes the connection when a write's context
	// ends mid-write, and a caller giving up must not cost the connection.
	// Only a socket stuck for the whole timeout does.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	err = wc.ws.Write(wctx, websocket.MessageText, frame)
	wcancel()
	if err != nil {
		return response{}, fmt.Errorf("onebot: %s: %w: %w", action, channel.ErrOffline, err)
	}
	select {
	case r := <-ch:
		return r, nil
	case <-wc.done:
		return response{}, fmt.Errorf("onebot: %s: %w", action, ErrConnectionLost)
	case <-ctx.Done():
		cause := context.Cause(ctx)
		if errors.Is(cause, ErrTimeout) {
			c.log.Warn("call_timeout", "action", action, "echo", echo, "timeout", timeout)
		}
		return response{}, fmt.Errorf("onebot: %s: %w", action, cause)
	}
}

// PendingCalls returns the number of API calls waiting for a response on
// the current connection (0 when none is open). Calls are removed when they
// are answered, time out or their connection ends.
func (c *Channel) PendingCalls() int {
	c.mu.Lock()
	wc := c.conn
	c.mu.Unlock()
	if wc == nil {
		return 0
	}
	return wc.pendingCount()
}
