package wecomtest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
)

// writeJSON answers with a JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErr answers an errcode the way WeCom does (HTTP 200).
func writeErr(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, http.StatusOK, map[string]any{"errcode": code, "errmsg": msg})
}

// answerFailure answers an injected failure; a Drop closes the connection
// without an answer.
func answerFailure(w http.ResponseWriter, f Failure) {
	if f.Drop {
		dropConn(w)
		return
	}
	status := f.Status
	if status == 0 {
		status = http.StatusBadGateway
		if f.ErrCode != 0 {
			status = http.StatusOK
		}
	}
	if f.ErrCode != 0 {
		writeJSON(w, status, map[string]any{"errcode": f.ErrCode, "errmsg": "injected failure"})
		return
	}
	http.Error(w, "<html>injected failure</html>", status)
}

// dropConn closes the client's connection without answering.
func dropConn(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// checkTokenLocked validates access_token: 40014 unknown, 42001 expired.
func (s *Server) checkTokenLocked(r *http.Request) (int, string) {
	tok := r.URL.Query().Get("access_token")
	exp, ok := s.tokens[tok]
	switch {
	case tok == "" || !ok:
		return CodeInvalidToken, "invalid access_token"
	case !s.clk.Now().Before(exp):
		return CodeTokenExpired, "access_token expired"
	}
	return 0, ""
}

func (s *Server) handleGetToken(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.takeFailureLocked("gettoken"); ok {
		answerFailure(w, f)
		return
	}
	switch {
	case q.Get("corpid") != s.cfg.CorpID:
		writeErr(w, CodeInvalidCorpID, "invalid corpid")
	case q.Get("corpsecret") != s.cfg.Secret:
		writeErr(w, CodeInvalidSecret, "invalid credential")
	default:
		b := make([]byte, 48)
		_, _ = rand.Read(b)
		tok := base64.RawURLEncoding.EncodeToString(b)
		s.tokens[tok] = s.clk.Now().Add(s.cfg.TokenLifetime)
		s.tokenCount++
		writeJSON(w, http.StatusOK, map[string]any{"errcode": 0, "errmsg": "ok", "access_token": tok,
			"expires_in": int64(s.cfg.TokenLifetime / time.Second)})
	}
}

// sendRequest is the body of message/send and appchat/send.
type sendRequest struct {
	ToUser  string `json:"touser"`
	ToParty string `json:"toparty"`
	ToTag   string `json:"totag"`
	ChatID  string `json:"chatid"`
	MsgType string `json:"msgtype"`
	AgentID int64  `json:"agentid"`
	Safe    int    `json:"safe"`
	Text    *struct {
		Content string `json:"content"`
	} `json:"text"`
	Image *mediaRef `json:"image"`
	Voice *mediaRef `json:"voice"`
	Video *mediaRef `json:"video"`
	File  *mediaRef `json:"file"`
	// EnableDuplicateCheck and DuplicateCheckInterval (seconds, default
	// 1800) drop a message identical to one sent within the interval.
	EnableDuplicateCheck   int   `json:"enable_duplicate_check"`
	DuplicateCheckInterval int64 `json:"duplicate_check_interval"`
}

type mediaRef struct {
	MediaID string `json:"media_id"`
}

// content checks a send body's content: text (at most 2048 bytes) or a
// known media_id.
func (s *Server) contentLocked(req *sendRequest) (text, mediaID string, code int, msg string) {
	switch req.MsgType {
	case "text":
		switch {
		case req.Text == nil || req.Text.Content == "":
			return "", "", CodeInvalidParam, "empty text content"
		case len(req.Text.Content) > MaxTextBytes:
			return "", "", CodeContentTooLong, "content size out of limit"
		}
		return req.Text.Content, "", 0, ""
	case "image", "voice", "video", "file":
		ref := map[string]*mediaRef{"image": req.Image, "voice": req.Voice, "video": req.Video, "file": req.File}[req.MsgType]
		if ref == nil || ref.MediaID == "" {
			return "", "", CodeInvalidParam, "no media_id"
		}
		if _, ok := s.media[ref.MediaID]; !ok {
			return "", "", CodeInvalidMediaID, "invalid media_id"
		}
		return "", ref.MediaID, 0, ""
	}
	return "", "", CodeInvalidParam, "invalid msgtype " + strconv.Quote(req.MsgType)
}

func (s *Server) handleMessageSend(w http.ResponseWriter, r *http.Request) {
	var req sendRequest
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	defer s.mu.Unlock()
	if code, msg := s.checkTokenLocked(r); code != 0 {
		writeErr(w, code, msg)
		return
	}
	f, failing := s.takeFailureLocked("message/send")
	if failing && !f.Drop {
		answerFailure(w, f)
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, CodeInvalidParam, "invalid json")
		return
	}
	if s.takeRejectLocked() {
		writeErr(w, CodeInvalidParam, "rejected by the test")
		return
	}
	if req.AgentID != s.cfg.AgentID {
		writeErr(w, CodeInvalidAgent, "invalid agentid")
		return
	}
	text, mediaID, code, msg := s.contentLocked(&req)
	if code != 0 {
		writeErr(w, code, msg)
		return
	}
	var valid, invalid []string
	for _, u := range strings.Split(req.ToUser, "|") {
		switch {
		case u == "":
		case s.kicked[u]:
			invalid = append(invalid, u)
		default:
			valid = append(valid, u)
		}
	}
	if len(valid) == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"errcode": CodeNoRecipient, "errmsg": "user & party & tag all invalid",
			"invaliduser": strings.Join(invalid, "|")})
		return
	}
	answer := func(id string) map[string]any {
		return map[string]any{"errcode": 0, "errmsg": "ok", "invaliduser": strings.Join(invalid, "|"),
			"invalidparty": "", "invalidtag": "", "unlicenseduser": "", "msgid": id}
	}
	if req.EnableDuplicateCheck == 1 {
		interval := time.Duration(req.DuplicateCheckInterval) * time.Second
		if interval <= 0 {
			interval = 1800 * time.Second
		}
		for i := len(s.sent) - 1; i >= 0; i-- {
			x := s.sent[i]
			if x.Op == "message/send" && x.Chat.ID == strings.Join(valid, "|") && x.MsgType == req.MsgType &&
				x.Text == text && x.MediaID == mediaID && s.clk.Now().Sub(x.At) < interval {
				s.duplicates++
				s.changedLocked()
				if failing {
					dropConn(w)
					return
				}
				writeJSON(w, http.StatusOK, answer(x.MessageID))
				return
			}
		}
	}
	id := "msg" + randomHex(12)
	s.recordSentLocked(&Sent{Op: "message/send", Chat: channel.Chat{Kind: channel.Private, ID: strings.Join(valid, "|")},
		Text: text, MsgType: req.MsgType, MediaID: mediaID, MessageID: id})
	if failing {
		dropConn(w) // delivered, but the answer is lost
		return
	}
	writeJSON(w, http.StatusOK, answer(id))
}

func (s *Server) handleAppChatSend(w http.ResponseWriter, r *http.Request) {
	var req sendRequest
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	defer s.mu.Unlock()
	if code, msg := s.checkTokenLocked(r); code != 0 {
		writeErr(w, code, msg)
		return
	}
	f, failing := s.takeFailureLocked("appchat/send")
	if failing && !f.Drop {
		answerFailure(w, f)
		return
	}
	if err := json.Unmarshal(body, &req); err != nil || req.ChatID == "" {
		writeErr(w, CodeInvalidParam, "invalid chatid")
		return
	}
	if s.takeRejectLocked() {
		writeErr(w, CodeInvalidParam, "rejected by the test")
		return
	}
	text, mediaID, code, msg := s.contentLocked(&req)
	if code != 0 {
		writeErr(w, code, msg)
		return
	}
	s.recordSentLocked(&Sent{Op: "appchat/send", Chat: channel.Chat{Kind: channel.Group, ID: req.ChatID},
		Text: text, MsgType: req.MsgType, MediaID: mediaID})
	if failing {
		dropConn(w)
		return
	}
	writeErr(w, 0, "ok")
}

// AddMedia stores a file as a temporary media of the app and returns its
// media_id (served by media/get for three days).
func (s *Server) AddMedia(data []byte, mime string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := "3" + randomHex(20)
	s.media[id] = mediaFile{data: append([]byte(nil), data...), mime: mime, created: s.clk.Now()}
	return id
}

func (s *Server) handleMediaGet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if code, msg := s.checkTokenLocked(r); code != 0 {
		s.mu.Unlock()
		writeErr(w, code, msg)
		return
	}
	if f, ok := s.takeFailureLocked("media/get"); ok {
		s.mu.Unlock()
		answerFailure(w, f)
		return
	}
	m, ok := s.media[r.URL.Query().Get("media_id")]
	if ok && s.clk.Now().Sub(m.created) > 72*time.Hour {
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		writeErr(w, CodeInvalidMediaID, "invalid media_id")
		return
	}
	w.Header().Set("Content-Type", m.mime)
	w.Header().Set("Content-Length", strconv.Itoa(len(m.data)))
	_, _ = w.Write(m.data)
}

// AddAIBotMedia stores a file an AI-bot message links to and returns the
// link and the aeskey the message carries: on the long connection a fresh
// key per file, with callbacks none (the file is encrypted with the
// callback's EncodingAESKey). The link is served for MediaLinkLifetime.
func (s *Server) AddAIBotMedia(data []byte) (link, aeskey string) {
	key := s.cfg.EncodingAESKey
	if s.cfg.Mode == ModeAIBotWS {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		aeskey = base64.StdEncoding.EncodeToString(b)
		key = aeskey
	}
	enc, err := EncryptMedia(data, key)
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := randomHex(16)
	s.media["aibot:"+id] = mediaFile{data: enc, mime: "application/octet-stream", created: s.clk.Now()}
	return s.hs.URL + "/aibot-media/" + id, aeskey
}

func (s *Server) handleAIBotMedia(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/aibot-media/")
	s.mu.Lock()
	m, ok := s.media["aibot:"+id]
	if ok && s.clk.Now().Sub(m.created) > MediaLinkLifetime {
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", m.mime)
	w.Header().Set("Content-Length", strconv.Itoa(len(m.data)))
	_, _ = w.Write(m.data)
}

// newResponseURLLocked issues a response_url for a message.
func (s *Server) newResponseURLLocked(msgID string, chat channel.Chat) string {
	code := randomHex(16)
	s.responseURL[code] = &responseCode{msgID: msgID, chat: chat, created: s.clk.Now()}
	return s.hs.URL + "/cgi-bin/aibot/response?response_code=" + code
}

func (s *Server) handleAIBotResponse(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	defer s.mu.Unlock()
	f, failing := s.takeFailureLocked("aibot/response")
	if failing && !f.Drop {
		answerFailure(w, f)
		return
	}
	rc := s.responseURL[r.URL.Query().Get("response_code")]
	switch {
	case rc == nil:
		writeErr(w, CodeInvalidParam, "invalid response_code")
		return
	case rc.used || s.clk.Now().Sub(rc.created) > ResponseURLLifetime:
		writeErr(w, CodeResponseURLUsed, "response_code used or expired")
		return
	}
	var req struct {
		MsgType  string `json:"msgtype"`
		Markdown *struct {
			Content string `json:"content"`
		} `json:"markdown"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.MsgType != "markdown" || req.Markdown == nil || req.Markdown.Content == "" {
		writeErr(w, CodeInvalidParam, "want a markdown message")
		return
	}
	if len(req.Markdown.Content) > MaxStreamBytes {
		writeErr(w, CodeContentTooLong, "content size out of limit")
		return
	}
	if s.takeRejectLocked() {
		writeErr(w, CodeInvalidParam, "rejected by the test")
		return
	}
	rc.used = true
	s.recordSentLocked(&Sent{Op: "aibot/response", Chat: rc.chat, Text: req.Markdown.Content, MsgType: "markdown", ReplyTo: rc.msgID})
	if failing {
		dropConn(w)
		return
	}
	writeErr(w, 0, "ok")
}
