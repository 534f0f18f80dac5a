package onebottest

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/personakit/persona/channel/onebot"
)

// maxFrame is the fake's read limit for frames and bodies.
const maxFrame = 16 << 20

// authorized checks the access token of a forward WebSocket or HTTP API
// client: "Authorization: Bearer <token>" or ?access_token=. It answers
// 401 (missing) or 403 (wrong).
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.AccessToken == "" {
		return true
	}
	var tok string
	present := false
	if h := r.Header.Get("Authorization"); h != "" {
		present = true
		scheme, t, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") {
			tok = strings.TrimSpace(t)
		}
	} else if q := r.URL.Query(); q.Has("access_token") {
		present = true
		tok = q.Get("access_token")
	}
	switch {
	case !present:
		http.Error(w, `{"status":"failed","retcode":1401,"data":null}`, http.StatusUnauthorized)
		return false
	case subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AccessToken)) != 1:
		http.Error(w, `{"status":"failed","retcode":1403,"data":null}`, http.StatusForbidden)
		return false
	}
	return true
}

// ServeHTTP serves the forward WebSocket (paths "/" universal, "/api",
// "/event"; a trailing slash is accepted) and the HTTP API ("/:action",
// GET or POST, params from the query, a form or a JSON body).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		http.Error(w, "onebottest: down", http.StatusServiceUnavailable)
		return
	}
	if !s.authorized(w, r) {
		return
	}
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.serveForward(w, r)
		return
	}
	s.serveAPI(w, r)
}

func (s *Server) serveForward(w http.ResponseWriter, r *http.Request) {
	c := &conn{}
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "":
		c.events, c.api = true, true
	case "/api":
		c.api = true
	case "/event":
		c.events = true
	default:
		http.NotFound(w, r)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		s.log.Warn("accept_failed", "err", err)
		return
	}
	c.ws = ws
	ws.SetReadLimit(maxFrame)
	if !s.track() {
		_ = ws.CloseNow()
		return
	}
	defer s.wg.Done()
	s.runConn(c)
}

// DialReverse starts a reverse WebSocket client (role Universal) that
// dials url with X-Self-ID, X-Client-Role and the Bearer token, serves the
// connection, and redials ReconnectInterval after a failure or
// disconnect, until ctx ends or Close.
func (s *Server) DialReverse(ctx context.Context, url string) {
	if !s.track() {
		return
	}
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		for ctx.Err() == nil {
			s.mu.Lock()
			down, ch := s.down, s.changed
			s.mu.Unlock()
			if down {
				select {
				case <-ch:
				case <-ctx.Done():
				}
				continue
			}
			s.dialOnce(ctx, url)
			t := time.NewTimer(s.cfg.ReconnectInterval)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
	}()
}

func (s *Server) dialOnce(ctx context.Context, url string) {
	hdr := http.Header{}
	hdr.Set("X-Self-ID", s.BotID())
	hdr.Set("X-Client-Role", "Universal")
	hdr.Set("User-Agent", "OneBot/11 (onebottest)")
	if s.cfg.AccessToken != "" {
		hdr.Set("Authorization", "Bearer "+s.cfg.AccessToken)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ws, resp, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: s.cfg.HTTPClient, HTTPHeader: hdr})
	cancel()
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	s.mu.Lock()
	s.dials++
	if err != nil && resp != nil {
		s.lastDial = resp.StatusCode
	}
	s.notifyLocked()
	s.mu.Unlock()
	if err != nil {
		s.log.Debug("reverse_dial_failed", "url", url, "err", err)
		return
	}
	ws.SetReadLimit(maxFrame)
	s.runConn(&conn{ws: ws, events: true, api: true})
}

// runConn registers a connection, greets it with a lifecycle connect event
// and answers its API requests until it closes.
func (s *Server) runConn(c *conn) {
	s.addConn(c)
	defer s.removeConn(c)
	defer func() { _ = c.ws.CloseNow() }()
	if c.events {
		b, _ := json.Marshal(s.metaEvent("lifecycle", map[string]any{"sub_type": "connect"}))
		wctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		_ = c.ws.Write(wctx, websocket.MessageText, b)
		cancel()
	}
	for {
		_, data, err := c.ws.Read(s.ctx)
		if err != nil {
			return
		}
		if !c.api {
			continue
		}
		var req struct {
			Action string          `json:"action"`
			Params json.RawMessage `json:"params"`
			Echo   json.RawMessage `json:"echo"`
		}
		if err := json.Unmarshal(data, &req); err != nil {
			s.writeResp(c, result{status: "failed", retcode: 1400, msg: "malformed request"}, nil)
			continue
		}
		p, err := decodeJSONParams(req.Params)
		if err != nil {
			s.writeResp(c, result{status: "failed", retcode: 1400, msg: "malformed params"}, req.Echo)
			continue
		}
		if !s.track() {
			return
		}
		go func() {
			defer s.wg.Done()
			res := s.do(s.ctx, req.Action, p, "ws")
			if res.stalled {
				return
			}
			s.writeResp(c, res, req.Echo)
		}()
	}
}

func (s *Server) writeResp(c *conn, res result, echo json.RawMessage) {
	env := res.envelope()
	if len(echo) > 0 {
		env["echo"] = echo
	}
	b, err := json.Marshal(env)
	if err != nil {
		return
	}
	wctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	_ = c.ws.Write(wctx, websocket.MessageText, b)
}

// serveAPI answers one HTTP API request.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	action := strings.Trim(r.URL.Path, "/")
	if action == "" || strings.Contains(action, "/") {
		http.NotFound(w, r)
		return
	}
	p := params{}
	for k, v := range r.URL.Query() {
		if k != "access_token" && len(v) > 0 {
			p[k] = v[0]
		}
	}
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxFrame))
		if err != nil {
			http.Error(w, "reading the body failed", http.StatusBadRequest)
			return
		}
		ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		switch {
		case len(bytes.TrimSpace(body)) == 0:
		case ct == "application/json" || ct == "":
			bp, err := decodeJSONParams(body)
			if err != nil {
				writeHTTP(w, http.StatusBadRequest, result{status: "failed", retcode: 1400, msg: "malformed JSON body"})
				return
			}
			for k, v := range bp {
				p[k] = v
			}
		case ct == "application/x-www-form-urlencoded":
			form, err := url.ParseQuery(string(body))
			if err != nil {
				writeHTTP(w, http.StatusBadRequest, result{status: "failed", retcode: 1400, msg: "malformed form body"})
				return
			}
			for k, v := range form {
				if len(v) > 0 {
					p[k] = v[0]
				}
			}
		default:
			writeHTTP(w, http.StatusNotAcceptable, result{status: "failed", retcode: 1406, msg: "unsupported Content-Type"})
			return
		}
	} else if r.Method != http.MethodGet {
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
		return
	}
	res := s.do(r.Context(), action, p, "http")
	if res.stalled {
		<-r.Context().Done()
		return
	}
	status := http.StatusOK
	if res.retcode == 1404 {
		status = http.StatusNotFound
	}
	writeHTTP(w, status, res)
}

func writeHTTP(w http.ResponseWriter, status int, res result) {
	b, _ := json.Marshal(res.envelope())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// SetPostURL makes the fake POST every event to url (HTTP POST
// reporting), signed with Secret when set; "" stops it.
func (s *Server) SetPostURL(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.postURL = url
}

// PostError is a pushed event the HTTP POST receiver did not accept with a
// 2xx status, after the retries.
type PostError struct {
	// Status is the receiver's last HTTP status.
	Status int
	// Body is the start of the receiver's last answer.
	Body string
}

// Error reports the status and the answer.
func (e *PostError) Error() string {
	return fmt.Sprintf("onebottest: event POST answered %d: %s", e.Status, strings.TrimSpace(e.Body))
}

// PushEvent pushes an event object (marshalled as JSON) to every event
// connection and the POST URL. It returns the POST error, if any.
func (s *Server) PushEvent(ctx context.Context, ev any) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return s.PushRaw(ctx, b)
}

// PushRaw pushes a raw frame (which need not be valid JSON) to every event
// connection and POSTs it to the POST URL (synchronously, retrying 5xx
// answers PostRetries times). Nothing is pushed while the fake is down or
// losing pushes. It returns the POST error, if any.
func (s *Server) PushRaw(ctx context.Context, frame []byte) error {
	s.mu.Lock()
	if s.down || s.losePushes {
		s.mu.Unlock()
		return nil
	}
	var targets []*conn
	for c := range s.conns {
		if c.events {
			targets = append(targets, c)
		}
	}
	postURL := s.postURL
	s.mu.Unlock()
	for _, c := range targets {
		wctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		if err := c.ws.Write(wctx, websocket.MessageText, frame); err != nil {
			s.log.Debug("push_failed", "err", err)
		}
		cancel()
	}
	if postURL == "" {
		return nil
	}
	return s.post(ctx, postURL, frame)
}

// post sends one event over HTTP POST with retries on 5xx.
func (s *Server) post(ctx context.Context, u string, body []byte) error {
	var last error
	for attempt := 0; attempt <= max(s.cfg.PostRetries, 0); attempt++ {
		if attempt > 0 {
			t := time.NewTimer(s.cfg.PostRetryInterval)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Self-ID", s.BotID())
		if s.cfg.Secret != "" {
			req.Header.Set("X-Signature", onebot.Sign(s.cfg.Secret, body))
		}
		resp, err := s.cfg.HTTPClient.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			last = err
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			return nil
		}
		last = &PostError{Status: resp.StatusCode, Body: string(b)}
		if resp.StatusCode < 500 {
			return last
		}
	}
	return last
}

// params are decoded request parameters.
type params map[string]any

func decodeJSONParams(raw json.RawMessage) (params, error) {
	p := params{}
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return p, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return nil, err
	}
	return p, nil
}

// int64 reads a numeric parameter given as a number or a string.
func (p params) int64(key string) (int64, bool) {
	switch v := p[key].(type) {
	case json.Number:
		n, err := v.Int64()
		return n, err == nil
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return n, err == nil
	case float64:
		return int64(v), true
	}
	return 0, false
}

func (p params) bool(key string) bool {
	switch v := p[key].(type) {
	case bool:
		return v
	case string:
		b, _ := strconv.ParseBool(v)
		return b
	case json.Number:
		return v.String() != "0"
	}
	return false
}

func (p params) str(key string) string {
	switch v := p[key].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return ""
}

// message reads a message parameter: a CQ-code string (plain text with
// auto_escape) or a segment array. raw is the string form, if any.
func (p params) message(key string) (m onebot.Message, raw string, err error) {
	switch v := p[key].(type) {
	case string:
		if p.bool("auto_escape") {
			if v == "" {
				return nil, v, nil
			}
			return onebot.Message{onebot.TextSegment(v)}, v, nil
		}
		return onebot.ParseCQ(v), v, nil
	case nil:
		return nil, "", errors.New("no message")
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, "", err
		}
		err = json.Unmarshal(b, &m)
		return m, "", err
	}
}
