package feishutest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrNotAcknowledged is wrapped by the error Push returns when the first
// delivery of the event was not acknowledged (a non-200 answer, no
// answer, a NACK on the long connection); the event is delivered again
// on the RetryDelays schedule.
var ErrNotAcknowledged = errors.New("feishutest: the event was not acknowledged")

// events is the event delivery state of a Server.
type events struct {
	callback   string
	queue      []*delivery
	deliveries []Delivery
	loseNext   int
	nonce      int
	wake       chan struct{}
	life       context.Context // ends when the server closes
	endLife    context.CancelFunc
	done       chan struct{}
}

func (e *events) init() {
	e.wake = make(chan struct{}, 1)
	e.life, e.endLife = context.WithCancel(context.Background())
	e.done = make(chan struct{})
}

func (e *events) stop() {
	e.endLife()
	<-e.done
}

// delivery is an event on its way to the bot.
type delivery struct {
	eventID  string
	body     []byte // the plaintext payload
	attempts int
	due      time.Time
	inflight bool
	done     bool
	first    chan struct{} // closed after the first attempt
	firstErr error
}

// Delivery is one delivery attempt of an event.
type Delivery struct {
	EventID string // the event's header.event_id
	// Attempt counts from 1.
	Attempt int
	// Transport is "webhook" or "ws".
	Transport string
	// Status is the HTTP status of the callback's answer, or the code of
	// the long-connection answer (0: none).
	Status int
	Err    string // why there was no answer ("" when there was one)
	// Lost marks an answer LoseNextAck threw away.
	Lost bool
	At   time.Time // on Config.Clock
}

// Acked reports whether the attempt was acknowledged.
func (d Delivery) Acked() bool { return d.Status == http.StatusOK && !d.Lost && d.Err == "" }

// Incoming is a message a user sends, as Push builds it.
type Incoming struct {
	// ChatID is the group's chat_id; empty for a private message to the
	// bot (the fake keeps one private chat per user).
	ChatID string
	// ChatType is "group" (default for a ChatID) or "topic_group".
	ChatType string
	From     User // the sender (OpenID required)
	// Text is the text of a text message.
	Text string
	// MentionBot puts a mention of the bot first ("@_user_1 " in the
	// text); Mentions adds mentions of users after it.
	MentionBot bool
	Mentions   []User // users mentioned after the bot
	// ParentID makes the message a reply (a quote) of that message.
	ParentID string
	// Post sends a rich-text message instead of text.
	Post *Post
	// Image sends an image message; its bytes are served by the
	// resource API.
	Image *Resource
	// MessageType and Content, when set, are used verbatim.
	MessageType, Content string
}

// Post is a rich-text message as a user sends it.
type Post struct {
	Title      string          // "" for none
	Paragraphs [][]PostElement // at elements name users by open_id
}

// PostElement is one element of a post paragraph: Tag "text" (Text),
// "a" (Text, Href), "at" (UserID: an open_id, UserName), "img"
// (ImageKey).
type PostElement = postElement

// Resource is the content of an image or file in a message.
type Resource struct {
	Key  string // the image_key or file_key
	Data []byte // the bytes the resource API serves
	MIME string // its Content-Type
}

// Pushed is a message Push created.
type Pushed struct {
	MessageID string    // the message's message_id (om_…)
	ChatID    string    // its chat's chat_id (a private chat's too)
	EventID   string    // the event's event_id
	Time      time.Time // its create_time
}

// Wire types of the im.message.receive_v1 event (schema 2.0), after the
// official sample.
type (
	wireIDs struct {
		UnionID string `json:"union_id"`
		UserID  string `json:"user_id"`
		OpenID  string `json:"open_id"`
	}
	wireMention struct {
		Key       string  `json:"key"`
		ID        wireIDs `json:"id"`
		Name      string  `json:"name"`
		TenantKey string  `json:"tenant_key"`
	}
	wireMessage struct {
		MessageID   string        `json:"message_id"`
		RootID      string        `json:"root_id"`
		ParentID    string        `json:"parent_id"`
		CreateTime  string        `json:"create_time"`
		UpdateTime  string        `json:"update_time"`
		ChatID      string        `json:"chat_id"`
		ChatType    string        `json:"chat_type"`
		MessageType string        `json:"message_type"`
		Content     string        `json:"content"`
		Mentions    []wireMention `json:"mentions,omitempty"`
		UserAgent   string        `json:"user_agent"`
	}
	wireSender struct {
		SenderID   wireIDs `json:"sender_id"`
		SenderType string  `json:"sender_type"`
		TenantKey  string  `json:"tenant_key"`
	}
	wireHeader struct {
		EventID    string `json:"event_id"`
		EventType  string `json:"event_type"`
		CreateTime string `json:"create_time"`
		Token      string `json:"token"`
		AppID      string `json:"app_id"`
		TenantKey  string `json:"tenant_key"`
	}
	wireEvent struct {
		Schema string     `json:"schema"`
		Header wireHeader `json:"header"`
		Event  struct {
			Sender  wireSender  `json:"sender"`
			Message wireMessage `json:"message"`
		} `json:"event"`
	}
)

// Push stores a user's message and delivers its im.message.receive_v1
// event: POSTed to the callback URL (encrypted and signed when the app
// has an Encrypt Key), or sent over the newest long connection. It waits
// for the first delivery attempt (while there is neither a callback URL
// nor a connection, until there is one) and returns its error, wrapping
// ErrNotAcknowledged when the bot did not accept it; the event is then
// delivered again on the RetryDelays schedule.
func (s *Server) Push(ctx context.Context, in Incoming) (Pushed, error) {
	s.mu.Lock()
	msg, body, err := s.buildLocked(in)
	if err != nil {
		s.mu.Unlock()
		return Pushed{}, err
	}
	d := s.enqueueLocked(msg.EventID, body)
	s.mu.Unlock()
	s.kick()
	p := Pushed{MessageID: msg.ID, ChatID: msg.ChatID, EventID: msg.EventID, Time: msg.CreateTime}
	select {
	case <-d.first:
		return p, d.firstErr
	case <-ctx.Done():
		return p, ctx.Err()
	}
}

// PushRaw delivers any event payload (plaintext JSON; encrypted on the
// way when the app has an Encrypt Key) under a new event id, with the
// same retries as Push, and waits for the first attempt.
func (s *Server) PushRaw(ctx context.Context, payload []byte) error {
	s.mu.Lock()
	d := s.enqueueLocked(s.newIDLocked("ev_"), slices.Clone(payload))
	s.mu.Unlock()
	s.kick()
	select {
	case <-d.first:
		return d.firstErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) enqueueLocked(eventID string, body []byte) *delivery {
	d := &delivery{eventID: eventID, body: body, due: s.clk.Now(), first: make(chan struct{})}
	s.queue = append(s.queue, d)
	return d
}

// buildLocked stores the message of in and builds its event payload.
func (s *Server) buildLocked(in Incoming) (*Message, []byte, error) {
	if in.From.OpenID == "" {
		return nil, nil, errors.New("feishutest: Incoming.From.OpenID is required")
	}
	s.addUserLocked(in.From)
	var chat *chatState
	if in.ChatID == "" {
		chat = s.p2pLocked(in.From.OpenID)
	} else {
		chat = s.groupLocked(in.ChatID)
		if in.ChatType != "" {
			chat.typ = in.ChatType
		}
	}
	var mentions []Mention
	var wm []wireMention
	add := func(u User) string {
		key := fmt.Sprintf("@_user_%d", len(mentions)+1)
		u.Name = cmp.Or(u.Name, s.users[u.OpenID].Name, u.OpenID)
		mentions = append(mentions, Mention{Key: key, OpenID: u.OpenID, Name: u.Name})
		wm = append(wm, wireMention{Key: key, ID: wireIDs{UnionID: u.UnionID, UserID: u.UserID, OpenID: u.OpenID}, Name: u.Name, TenantKey: s.cfg.TenantKey})
		return key
	}
	var keys []string
	if in.MentionBot {
		keys = append(keys, add(User{OpenID: s.cfg.BotOpenID, Name: s.cfg.BotName}))
	}
	for _, u := range in.Mentions {
		s.addUserLocked(u)
		u = s.users[u.OpenID]
		keys = append(keys, add(u))
	}
	m := &Message{ID: s.newIDLocked("om_"), ParentID: in.ParentID, ChatID: chat.id, ChatType: chat.typ,
		SenderID: in.From.OpenID, CreateTime: s.clk.Now(), Mentions: mentions}
	if in.ParentID != "" {
		m.RootID = in.ParentID
		if p := s.messages[in.ParentID]; p != nil && p.RootID != "" {
			m.RootID = p.RootID
		}
	}
	switch {
	case in.MessageType != "":
		m.MsgType, m.Content = in.MessageType, in.Content
	case in.Image != nil:
		m.MsgType = "image"
		b, _ := json.Marshal(map[string]string{"image_key": in.Image.Key})
		m.Content = string(b)
		s.resources[m.ID+"/"+in.Image.Key] = resource{data: slices.Clone(in.Image.Data), mime: in.Image.MIME}
	case in.Post != nil:
		m.MsgType = "post"
		var first []postElement
		for i, k := range keys {
			first = append(first, postElement{Tag: "at", UserID: k, UserName: mentions[i].Name}, postElement{Tag: "text", Text: " "})
		}
		paras := slices.Clone(in.Post.Paragraphs)
		for i, para := range paras {
			para = slices.Clone(para)
			for j, e := range para {
				if e.Tag == "at" && !strings.HasPrefix(e.UserID, "@_") {
					u := s.users[e.UserID]
					u.OpenID = e.UserID
					u.Name = cmp.Or(e.UserName, u.Name)
					para[j].UserID = add(u)
					para[j].UserName = u.Name
				}
			}
			paras[i] = para
		}
		if len(first) > 0 {
			if len(paras) == 0 {
				paras = [][]postElement{nil}
			}
			paras[0] = append(first, paras[0]...)
		}
		b, _ := json.Marshal(post{Title: in.Post.Title, Content: paras})
		m.MsgType, m.Content = "post", string(b)
	default:
		text := in.Text
		if len(keys) > 0 {
			text = strings.Join(keys, " ") + " " + text
		}
		b, _ := json.Marshal(map[string]string{"text": text})
		m.MsgType, m.Content = "text", string(b)
	}
	m.Mentions = mentions
	m.EventID = s.newIDLocked("")
	s.storeLocked(m)

	var ev wireEvent
	ms := strconv.FormatInt(m.CreateTime.UnixMilli(), 10)
	ev.Schema = "2.0"
	ev.Header = wireHeader{EventID: m.EventID, EventType: "im.message.receive_v1", CreateTime: ms,
		Token: s.cfg.VerificationToken, AppID: s.cfg.AppID, TenantKey: s.cfg.TenantKey}
	u := s.users[in.From.OpenID]
	ev.Event.Sender = wireSender{SenderID: wireIDs{UnionID: u.UnionID, UserID: u.UserID, OpenID: u.OpenID}, SenderType: "user", TenantKey: s.cfg.TenantKey}
	ev.Event.Message = wireMessage{MessageID: m.ID, RootID: m.RootID, ParentID: m.ParentID, CreateTime: ms, UpdateTime: ms,
		ChatID: m.ChatID, ChatType: m.ChatType, MessageType: m.MsgType, Content: m.Content, Mentions: wm}
	body, err := json.Marshal(ev)
	return m, body, err
}

// SetCallback sets the request URL events are POSTed to ("" returns to
// the long connection). Set it before pushing events in webhook mode.
func (s *Server) SetCallback(url string) {
	s.mu.Lock()
	s.callback = url
	s.mu.Unlock()
	s.kick()
}

// VerifyCallback sends the console's URL verification to the callback
// URL and checks that the challenge comes back.
func (s *Server) VerifyCallback(ctx context.Context) error {
	s.mu.Lock()
	url := s.callback
	challenge := s.newIDLocked("challenge_")
	s.mu.Unlock()
	if url == "" {
		return errors.New("feishutest: no callback URL set")
	}
	body, _ := json.Marshal(map[string]string{"challenge": challenge, "token": s.cfg.VerificationToken, "type": "url_verification"})
	status, answer, err := s.post(ctx, url, body)
	if err != nil {
		return err
	}
	var got struct {
		Challenge string `json:"challenge"`
	}
	if status != http.StatusOK || json.Unmarshal(answer, &got) != nil || got.Challenge != challenge {
		return fmt.Errorf("feishutest: URL verification failed: HTTP %d, answer %q", status, answer)
	}
	return nil
}

// LoseNextAck makes the fake throw away the bot's next answer to a
// delivery, as if it never arrived: the event is delivered again.
func (s *Server) LoseNextAck() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseNext++
}

// Deliveries returns a copy of the delivery attempts so far.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

// WaitDeliveries waits until at least n delivery attempts were made.
func (s *Server) WaitDeliveries(ctx context.Context, n int) ([]Delivery, error) {
	err := s.waitFor(ctx, func() bool { return len(s.deliveries) >= n })
	return s.Deliveries(), err
}

// Pending counts the events not yet acknowledged (and not given up).
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.queue {
		if !d.done {
			n++
		}
	}
	return n
}

func (s *Server) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// dispatch starts the due deliveries and sleeps on the clock until the
// next one is due.
func (s *Server) dispatch() {
	defer close(s.done)
	for {
		s.mu.Lock()
		now := s.clk.Now()
		var next time.Time
		var todo []*delivery
		transport := s.callback != "" || len(s.conns) > 0
		if !s.closed && !s.offline {
			for _, d := range s.queue {
				switch {
				case d.done || d.inflight:
				case d.due.After(now):
					if next.IsZero() || d.due.Before(next) {
						next = d.due
					}
				case transport:
					d.inflight = true
					todo = append(todo, d)
				}
			}
		}
		s.queue = slices.DeleteFunc(s.queue, func(d *delivery) bool { return d.done })
		s.mu.Unlock()
		for _, d := range todo {
			go s.attempt(d)
		}
		var timer <-chan time.Time
		var t interface{ Stop() bool }
		if !next.IsZero() {
			ct := s.clk.NewTimer(next.Sub(now))
			t, timer = ct, ct.C()
		}
		select {
		case <-s.wake:
		case <-timer:
		case <-s.life.Done():
		}
		if t != nil {
			t.Stop()
		}
		if s.life.Err() != nil {
			return
		}
	}
}

// attempt makes one delivery attempt over the current transport.
func (s *Server) attempt(d *delivery) {
	s.mu.Lock()
	url := s.callback
	conn := s.newestConnLocked()
	s.mu.Unlock()
	rec := Delivery{EventID: d.eventID, At: s.clk.Now()}
	switch {
	case url != "":
		rec.Transport = "webhook"
		status, _, err := s.post(s.life, url, d.body)
		rec.Status = status
		if err != nil {
			rec.Err = err.Error()
		}
	case conn != nil:
		rec.Transport = "ws"
		code, err := conn.deliver(s.life, d.body)
		rec.Status = code
		if err != nil {
			rec.Err = err.Error()
		}
	default:
		rec.Err = "no transport"
	}
	s.mu.Lock()
	if s.loseNext > 0 && rec.Err == "" {
		s.loseNext--
		rec.Lost = true
	}
	d.attempts++
	rec.Attempt = d.attempts
	s.deliveries = append(s.deliveries, rec)
	d.inflight = false
	ok := rec.Acked()
	switch {
	case ok:
		d.done = true
	case d.attempts <= len(s.cfg.RetryDelays):
		d.due = s.clk.Now().Add(s.cfg.RetryDelays[d.attempts-1])
	default:
		d.done = true // Feishu gives up after the last retry
	}
	if d.attempts == 1 {
		if !ok {
			d.firstErr = fmt.Errorf("%w: %s status %d %s", ErrNotAcknowledged, rec.Transport, rec.Status, rec.Err)
		}
		close(d.first)
	}
	s.notifyLocked()
	s.mu.Unlock()
	s.kick()
}

// post POSTs a plaintext payload to url the way Feishu does: encrypted
// ({"encrypt": …}) and signed when the app has an Encrypt Key, with the
// timestamp and nonce headers. It returns the status and body.
func (s *Server) post(ctx context.Context, url string, plain []byte) (int, []byte, error) {
	body := plain
	s.mu.Lock()
	s.nonce++
	nonce := "nonce" + strconv.Itoa(s.nonce)
	s.mu.Unlock()
	if s.cfg.EncryptKey != "" {
		body, _ = json.Marshal(map[string]string{"encrypt": Encrypt(s.cfg.EncryptKey, plain)})
	}
	ts := strconv.FormatInt(s.clk.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("X-Lark-Request-Timestamp", ts)
	req.Header.Set("X-Lark-Request-Nonce", nonce)
	if s.cfg.EncryptKey != "" {
		req.Header.Set("X-Lark-Signature", Sign(ts, nonce, s.cfg.EncryptKey, body))
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, answer, nil
}
