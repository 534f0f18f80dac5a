package wecomtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
)

// Incoming is a user message the fake delivers to the bot.
type Incoming struct {
	// Chat is where it is posted: a private chat's ID is the user; a group
	// chat's ID is the chatid (AI bots only: apps get no group messages).
	Chat channel.Chat
	// From is the sender's userid (default: Chat.ID of a private chat).
	From string
	// Text is the text. In a group an AI bot only gets messages that
	// @-mention it, so the text is always written after "@<BotName> ".
	Text string
	// MentionBot is implied in AI-bot groups and meaningless elsewhere;
	// it is kept so chantest's Inbound maps onto Incoming one to one.
	MentionBot bool
	// QuoteID makes the message quote this message (AI bot): its content
	// goes into "quote".
	QuoteID string
	// Image is a picture: an app's MediaId and PicUrl, or an AI bot's link
	// and aeskey (see AddAIBotMedia). With Text, an AI-bot message is
	// "mixed".
	Image *Media
	// Voice is a voice message: an app's MediaId, Format and Recognition,
	// or an AI bot's transcription (Recognition).
	Voice *Voice
	// File is a file (AI bot).
	File *Media
}

// Media references a picture or file.
type Media struct {
	// MediaID and PicURL are an app message's.
	MediaID string
	PicURL  string
	// URL and AESKey are an AI-bot message's.
	URL    string
	AESKey string
}

// Voice is a voice message.
type Voice struct {
	MediaID     string
	Format      string
	Recognition string
}

// Message is a pushed message.
type Message struct {
	ID   string
	Chat channel.Chat
	// Plain is the message as the bot decrypts it (XML or JSON).
	Plain []byte
	// ReqID is the frame's req_id (long connection).
	ReqID string
}

// Push delivers a user message the way the mode's platform does: an
// encrypted callback (posted again after a non-2xx answer, up to
// Config.Retries times) or a callback frame on the long connection. It
// returns the message once delivered; the error is the last failure
// when no delivery was accepted.
func (s *Server) Push(ctx context.Context, in Incoming) (Message, error) {
	s.mu.Lock()
	m, err := s.buildLocked(in)
	s.mu.Unlock()
	if err != nil {
		return Message{}, err
	}
	switch s.cfg.Mode {
	case ModeAIBotWS:
		m.ReqID, err = s.ws.push(ctx, cmdCallback, m.Plain)
		return m, err
	case ModeAIBot:
		status, body, err := s.postCallback(ctx, m.ID, m.Plain)
		if err != nil {
			return m, err
		}
		if status == http.StatusOK && len(bytes.TrimSpace(body)) > 0 {
			if err := s.streamAnswer(m.ID, m.Chat, fromOf(in), body); err != nil {
				return m, err
			}
		}
		return m, nil
	default:
		_, _, err := s.postCallback(ctx, m.ID, m.Plain)
		return m, err
	}
}

func fromOf(in Incoming) string {
	if in.From != "" {
		return in.From
	}
	return in.Chat.ID
}

// buildLocked writes the plaintext of a message and remembers it.
func (s *Server) buildLocked(in Incoming) (Message, error) {
	from := fromOf(in)
	if !in.Chat.Kind.Valid() || in.Chat.ID == "" || from == "" {
		return Message{}, fmt.Errorf("wecomtest: incoming message needs a chat and a sender, got %+v", in)
	}
	if in.Chat.Kind == channel.Private && from != in.Chat.ID {
		return Message{}, fmt.Errorf("wecomtest: a private chat's id is the sender's userid (%q, not %q)", from, in.Chat.ID)
	}
	id := s.newMsgIDLocked()
	now := s.clk.Now()
	var plain []byte
	text := in.Text
	if s.cfg.Mode == ModeApp {
		if in.Chat.Kind != channel.Private {
			return Message{}, errors.New("wecomtest: a self-built app receives private messages only")
		}
		plain = s.appXMLLocked(id, from, now, in)
	} else {
		if in.Chat.Kind == channel.Group && text != "" {
			text = "@" + s.cfg.BotName + " " + text
		}
		b, err := s.aibotJSONLocked(id, from, now, in, text)
		if err != nil {
			return Message{}, err
		}
		plain = b
	}
	s.messages[id] = &message{id: id, chat: in.Chat, from: from, text: text}
	s.chats[in.Chat] = true
	return Message{ID: id, Chat: in.Chat, Plain: plain}, nil
}

// cdata wraps s in CDATA sections (splitting "]]>").
func cdata(s string) string {
	return "<![CDATA[" + strings.ReplaceAll(s, "]]>", "]]]]><![CDATA[>") + "]]>"
}

// appXMLLocked writes an app message.
func (s *Server) appXMLLocked(id, from string, now time.Time, in Incoming) []byte {
	var b strings.Builder
	b.WriteString("<xml><ToUserName>" + cdata(s.cfg.CorpID) + "</ToUserName>")
	b.WriteString("<FromUserName>" + cdata(from) + "</FromUserName>")
	b.WriteString("<CreateTime>" + strconv.FormatInt(now.Unix(), 10) + "</CreateTime>")
	switch {
	case in.Image != nil:
		b.WriteString("<MsgType>" + cdata("image") + "</MsgType>")
		b.WriteString("<PicUrl>" + cdata(in.Image.PicURL) + "</PicUrl><MediaId>" + cdata(in.Image.MediaID) + "</MediaId>")
	case in.Voice != nil:
		b.WriteString("<MsgType>" + cdata("voice") + "</MsgType>")
		b.WriteString("<MediaId>" + cdata(in.Voice.MediaID) + "</MediaId><Format>" + cdata(in.Voice.Format) + "</Format>")
		if in.Voice.Recognition != "" {
			b.WriteString("<Recognition>" + cdata(in.Voice.Recognition) + "</Recognition>")
		}
	default:
		b.WriteString("<MsgType>" + cdata("text") + "</MsgType><Content>" + cdata(in.Text) + "</Content>")
	}
	b.WriteString("<MsgId>" + id + "</MsgId><AgentID>" + strconv.FormatInt(s.cfg.AgentID, 10) + "</AgentID></xml>")
	return []byte(b.String())
}

// aibotJSONLocked writes an AI-bot message.
func (s *Server) aibotJSONLocked(id, from string, now time.Time, in Incoming, text string) ([]byte, error) {
	m := map[string]any{
		"msgid":       id,
		"aibotid":     s.cfg.BotID,
		"from":        map[string]string{"userid": from},
		"create_time": now.Unix(),
	}
	if in.Chat.Kind == channel.Group {
		m["chatid"], m["chattype"] = in.Chat.ID, "group"
	} else {
		m["chattype"] = "single"
	}
	if s.cfg.Mode == ModeAIBot {
		m["response_url"] = s.newResponseURLLocked(id, in.Chat)
	}
	media := func(x *Media) map[string]string {
		o := map[string]string{"url": x.URL}
		if x.AESKey != "" {
			o["aeskey"] = x.AESKey
		}
		return o
	}
	switch {
	case in.Image != nil && text != "":
		m["msgtype"] = "mixed"
		m["mixed"] = map[string]any{"msg_item": []any{
			map[string]any{"msgtype": "text", "text": map[string]string{"content": text}},
			map[string]any{"msgtype": "image", "image": media(in.Image)},
		}}
	case in.Image != nil:
		m["msgtype"], m["image"] = "image", media(in.Image)
	case in.File != nil:
		m["msgtype"], m["file"] = "file", media(in.File)
	case in.Voice != nil:
		m["msgtype"], m["voice"] = "voice", map[string]string{"content": in.Voice.Recognition}
	default:
		m["msgtype"], m["text"] = "text", map[string]string{"content": text}
	}
	if in.QuoteID != "" {
		q, ok := s.messages[in.QuoteID]
		if !ok {
			return nil, fmt.Errorf("wecomtest: quoted message %q is unknown", in.QuoteID)
		}
		m["quote"] = map[string]any{"msgtype": "text", "text": map[string]string{"content": q.text}}
	}
	return json.Marshal(m)
}

// SealCallback returns a callback request for plain exactly as WeCom
// sends it: the query (msg_signature, timestamp, nonce) and the body (the
// XML envelope for apps, {"encrypt": …} for AI bots). Tests tamper with
// it and post it with PostCallback.
func (s *Server) SealCallback(plain []byte) (url.Values, []byte) {
	receiver := ""
	if s.cfg.Mode == ModeApp {
		receiver = s.cfg.CorpID
	}
	enc := s.kit.seal(plain, receiver)
	ts := strconv.FormatInt(s.clk.Now().Unix(), 10)
	nonce := strconv.FormatUint(uint64(s.clk.Now().UnixNano())%1_000_000_000+1_000_000_000, 10)
	q := url.Values{"msg_signature": {s.kit.sign(ts, nonce, enc)}, "timestamp": {ts}, "nonce": {nonce}}
	if s.cfg.Mode == ModeApp {
		body := "<xml><ToUserName>" + cdata(s.cfg.CorpID) + "</ToUserName><Encrypt>" + cdata(enc) +
			"</Encrypt><AgentID>" + cdata(strconv.FormatInt(s.cfg.AgentID, 10)) + "</AgentID></xml>"
		return q, []byte(body)
	}
	body, _ := json.Marshal(map[string]string{"encrypt": enc})
	return q, body
}

// VerifyQuery returns the query of a URL verification (GET) whose echostr
// decrypts to plain.
func (s *Server) VerifyQuery(plain string) url.Values {
	receiver := ""
	if s.cfg.Mode == ModeApp {
		receiver = s.cfg.CorpID
	}
	enc := s.kit.seal([]byte(plain), receiver)
	ts := strconv.FormatInt(s.clk.Now().Unix(), 10)
	nonce := "1372623149"
	return url.Values{"msg_signature": {s.kit.sign(ts, nonce, enc)}, "timestamp": {ts}, "nonce": {nonce}, "echostr": {enc}}
}

// PostCallback posts a callback request to the callback URL once and
// returns the status and body of the answer.
func (s *Server) PostCallback(ctx context.Context, q url.Values, body []byte) (int, []byte, error) {
	s.mu.Lock()
	target := s.callbackURL
	s.mu.Unlock()
	if target == "" {
		return 0, nil, errors.New("wecomtest: no callback URL (Config.CallbackURL or SetCallbackURL)")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	ct := "application/json"
	if s.cfg.Mode == ModeApp {
		ct = "text/xml"
	}
	req.Header.Set("Content-Type", ct)
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, b, err
}

// PushRaw posts plain (any bytes, for bad-input tests) as a correctly
// encrypted and signed callback, once, or writes it as a callback frame's
// body on the long connection.
func (s *Server) PushRaw(ctx context.Context, plain []byte) (int, []byte, error) {
	if s.cfg.Mode == ModeAIBotWS {
		_, err := s.ws.pushRaw(ctx, cmdCallback, plain)
		return 0, nil, err
	}
	q, body := s.SealCallback(plain)
	return s.PostCallback(ctx, q, body)
}

// postCallback posts a message callback, again after a non-2xx answer or
// none, up to Config.Retries times.
func (s *Server) postCallback(ctx context.Context, msgID string, plain []byte) (int, []byte, error) {
	if s.isOffline() {
		return 0, nil, errors.New("wecomtest: offline")
	}
	q, body := s.SealCallback(plain)
	var lastErr error
	for range 1 + s.cfg.Retries {
		status, b, err := s.PostCallback(ctx, q, body)
		d := Delivery{MsgID: msgID, Status: status}
		if err != nil {
			d.Err = err.Error()
		}
		s.mu.Lock()
		s.deliveries = append(s.deliveries, d)
		s.changedLocked()
		s.mu.Unlock()
		if err == nil && status/100 == 2 {
			return status, b, nil
		}
		if ctx.Err() != nil {
			return status, b, ctx.Err()
		}
		if err != nil {
			lastErr = err
		} else {
			lastErr = fmt.Errorf("wecomtest: callback answered HTTP %d", status)
		}
	}
	return 0, nil, lastErr
}

// OpenReply checks and decrypts an AI bot's passive reply body and
// returns its plaintext.
func (s *Server) OpenReply(body []byte) ([]byte, error) {
	var r struct {
		Encrypt      string          `json:"encrypt"`
		MsgSignature string          `json:"msgsignature"`
		Timestamp    json.RawMessage `json:"timestamp"`
		Nonce        string          `json:"nonce"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("wecomtest: passive reply is not JSON: %w", err)
	}
	ts := strings.Trim(string(r.Timestamp), `"`)
	if r.Encrypt == "" || Sign(s.cfg.Token, ts, r.Nonce, r.Encrypt) != r.MsgSignature {
		return nil, errors.New("wecomtest: passive reply signature does not match")
	}
	return s.kit.open(r.Encrypt, "")
}

// streamState is the platform's view of a stream answer.
type streamState struct {
	id      string
	msgID   string
	chat    channel.Chat
	from    string
	created time.Time
	polls   int
	sent    *Sent
}

// StreamView is a stream as WeCom shows it.
type StreamView struct {
	ID       string
	MsgID    string
	Chat     channel.Chat
	Content  string
	Finished bool
	Polls    int
}

// streamAnswer handles the passive answer to a message callback.
func (s *Server) streamAnswer(msgID string, chat channel.Chat, from string, body []byte) error {
	plain, err := s.OpenReply(body)
	if err != nil {
		return err
	}
	var r struct {
		MsgType string `json:"msgtype"`
		Stream  struct {
			ID      string `json:"id"`
			Finish  bool   `json:"finish"`
			Content string `json:"content"`
		} `json:"stream"`
	}
	if err := json.Unmarshal(plain, &r); err != nil || r.MsgType != "stream" || r.Stream.ID == "" {
		return fmt.Errorf("wecomtest: passive reply is not a stream: %s", plain)
	}
	s.mu.Lock()
	st, ok := s.streams[r.Stream.ID]
	if !ok {
		st = &streamState{id: r.Stream.ID, msgID: msgID, chat: chat, from: from, created: s.clk.Now()}
		s.streams[r.Stream.ID] = st
	}
	s.updateStreamLocked(st, r.Stream.Content, r.Stream.Finish)
	finished := st.sent != nil && st.sent.Finished
	s.mu.Unlock()
	if !finished && !s.cfg.ManualPoll {
		s.wg.Go(func() { s.pollLoop(st.id) })
	}
	return nil
}

// updateStreamLocked records a stream's content as shown.
func (s *Server) updateStreamLocked(st *streamState, content string, finish bool) {
	if len(content) > MaxStreamBytes {
		content = content[:MaxStreamBytes] // WeCom shows no more
	}
	if st.sent == nil {
		if content == "" && !finish {
			return
		}
		st.sent = &Sent{Op: "stream", Chat: st.chat, MsgType: "stream", ReplyTo: st.msgID, MessageID: st.id}
		s.recordSentLocked(st.sent)
	}
	if st.sent.Finished {
		return
	}
	st.sent.Text, st.sent.Finished = content, finish
	if content != "" {
		s.messages[st.id] = &message{id: st.id, chat: st.chat, text: content, fromMe: true}
	}
	s.changedLocked()
}

// pollLoop polls a stream until it finishes, the window passes or the
// server closes.
func (s *Server) pollLoop(id string) {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := s.PollStream(ctx, id)
		cancel()
		if err == nil && v.Finished {
			return
		}
		s.mu.Lock()
		st := s.streams[id]
		over := st == nil || s.clk.Now().Sub(st.created) > StreamWindow
		s.mu.Unlock()
		if over {
			return
		}
	}
}

// PollStream sends one stream refresh callback for stream id and records
// the answer. A Failure{Drop: true} injected for "poll" posts the refresh
// and throws its answer away (the connection broke on the way back).
func (s *Server) PollStream(ctx context.Context, id string) (StreamView, error) {
	s.mu.Lock()
	st, ok := s.streams[id]
	if !ok {
		s.mu.Unlock()
		return StreamView{}, fmt.Errorf("wecomtest: unknown stream %q", id)
	}
	if st.sent != nil && st.sent.Finished {
		v := s.viewLocked(st)
		s.mu.Unlock()
		return v, nil
	}
	f, lose := s.takeFailureLocked("poll")
	st.polls++
	m := map[string]any{
		"msgid":    s.newMsgIDLocked(),
		"aibotid":  s.cfg.BotID,
		"from":     map[string]string{"userid": st.from},
		"msgtype":  "stream",
		"stream":   map[string]string{"id": id},
		"chattype": "single",
	}
	if st.chat.Kind == channel.Group {
		m["chatid"], m["chattype"] = st.chat.ID, "group"
	}
	s.mu.Unlock()
	plain, _ := json.Marshal(m)
	q, body := s.SealCallback(plain)
	status, ans, err := s.PostCallback(ctx, q, body)
	if err != nil {
		return StreamView{}, err
	}
	if lose && f.Drop {
		return StreamView{}, errors.New("wecomtest: the poll's answer was lost (injected)")
	}
	if status != http.StatusOK {
		return StreamView{}, fmt.Errorf("wecomtest: poll answered HTTP %d", status)
	}
	plainAns, err := s.OpenReply(ans)
	if err != nil {
		return StreamView{}, err
	}
	var r struct {
		Stream struct {
			ID      string `json:"id"`
			Finish  bool   `json:"finish"`
			Content string `json:"content"`
		} `json:"stream"`
	}
	if err := json.Unmarshal(plainAns, &r); err != nil || r.Stream.ID != id {
		return StreamView{}, fmt.Errorf("wecomtest: poll answer is not stream %q: %s", id, plainAns)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updateStreamLocked(st, r.Stream.Content, r.Stream.Finish)
	return s.viewLocked(st), nil
}

func (s *Server) viewLocked(st *streamState) StreamView {
	v := StreamView{ID: st.id, MsgID: st.msgID, Chat: st.chat, Polls: st.polls}
	if st.sent != nil {
		v.Content, v.Finished = st.sent.Text, st.sent.Finished
	}
	return v
}

// Streams lists the streams the bot answered with.
func (s *Server) Streams() []StreamView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]StreamView, 0, len(s.streams))
	for _, st := range s.streams {
		out = append(out, s.viewLocked(st))
	}
	return out
}

// StreamOf returns the stream answering message msgID.
func (s *Server) StreamOf(msgID string) (StreamView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.streams {
		if st.msgID == msgID {
			return s.viewLocked(st), true
		}
	}
	return StreamView{}, false
}

// WaitStream waits until the stream answering msgID is finished.
func (s *Server) WaitStream(ctx context.Context, msgID string) (StreamView, error) {
	var v StreamView
	err := s.wait(ctx, func() bool {
		for _, st := range s.streams {
			if st.msgID == msgID && st.sent != nil && st.sent.Finished {
				v = s.viewLocked(st)
				return true
			}
		}
		return false
	})
	return v, err
}
