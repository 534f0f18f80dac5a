package feishu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// ErrRunning is returned by Run while another Run of the same Channel is
// active.
var ErrRunning = errors.New("feishu: already running")

// cacheSize bounds each of the adapter's memory caches (user names,
// private chat ids, recent messages for quotes).
const cacheSize = 4096

// Channel is a Feishu / Lark adapter: a channel.Channel that receives
// im.message.receive_v1 events by webhook or long connection and sends
// through the Open API. It implements channel.TextLimiter,
// channel.MediaFetcher and channel.HistoryFetcher, and is an http.Handler
// for webhook mode.
//
// Create it with New. All methods are safe for concurrent use; Run may be
// active at most once at a time.
type Channel struct {
	cfg    Config
	clk    clock.Clock
	log    *slog.Logger
	tokens *tokenSource
	jitter func() float64 // in [0, 1); tests may replace it

	running atomic.Bool
	// active is set while Run is active and the bot is known: the
	// webhook handler delivers only then.
	active atomic.Pointer[activeRun]
	// offline is set while Run reports the channel offline; Send then
	// fails fast with channel.ErrOffline.
	offline atomic.Bool

	mu     sync.Mutex
	botID  string               // the bot's open_id, once known
	names  *lru[string]         // open_id → display name (from mentions)
	p2p    *lru[string]         // open_id → p2p chat_id
	quotes *lru[channel.Quoted] // message_id → what a quote of it shows
}

type activeRun struct {
	sink  channel.Sink
	botID string
}

// Compile-time checks of the capabilities.
var (
	_ channel.Channel        = (*Channel)(nil)
	_ channel.TextLimiter    = (*Channel)(nil)
	_ channel.MediaFetcher   = (*Channel)(nil)
	_ channel.HistoryFetcher = (*Channel)(nil)
	_ http.Handler           = (*Channel)(nil)
)

// New validates cfg and returns a Channel. It does no I/O.
func New(cfg Config) (*Channel, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Channel{
		cfg:    cfg,
		clk:    cfg.Clock,
		log:    cfg.Logger.With("platform", Platform),
		jitter: rand.Float64,
		names:  newLRU[string](cacheSize),
		p2p:    newLRU[string](cacheSize),
		quotes: newLRU[channel.Quoted](cacheSize),
	}
	c.tokens = newTokenSource(c)
	return c, nil
}

// Name returns "feishu".
func (c *Channel) Name() string { return Platform }

// Shareable reports true in ModeWebhook (channel.Shareable): Feishu posts
// each event callback to whichever process its request URL reaches, and
// sends are plain Open API calls (deduplicated by the platform through
// the send uuid), so several processes may run the channel at once. The
// long connection (ModeWebSocket) is one client's connection.
func (c *Channel) Shareable() bool { return c.cfg.Mode == ModeWebhook }

// BotID returns the bot's open_id, known once Run learnt it from the bot
// info API ("" before). It is Event.BotID and what mentions of the bot
// carry.
func (c *Channel) BotID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.botID
}

// TextLimit is 4000 runes per message (MaxTextRunes).
func (c *Channel) TextLimit() channel.TextLimit {
	return channel.TextLimit{Unit: channel.Runes, Max: MaxTextRunes}
}

// SendUUID is the send uuid derived from an idempotency key: the key
// itself when it is at most MaxUUIDLength characters of [A-Za-z0-9_-],
// else the first 50 hex digits of its SHA-256. The Open API sends at most
// one message per uuid within an hour, so a retried send of the same
// chunk is not delivered twice.
func SendUUID(key string) string {
	if key == "" {
		return ""
	}
	ok := len(key) <= MaxUUIDLength
	for i := 0; ok && i < len(key); i++ {
		c := key[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if ok {
		return key
	}
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])[:MaxUUIDLength]
}

// sentMessage is the part of a sent message the adapter reads.
type sentMessage struct {
	MessageID  string `json:"message_id"`
	ChatID     string `json:"chat_id"`
	CreateTime msTime `json:"create_time"`
}

// Send delivers out and returns the ids of the message(s) it produced.
//
// The text goes out as a text message, mentions first as <at
// user_id="ou_…">Name</at> (the name when the adapter learnt it from a
// mention); a text containing '<' goes out as a post instead
// (one paragraph per line, literal text elements, at elements for the
// mentions), because the text type would read markup in it. With ReplyTo
// the first message is a reply (POST /im/v1/messages/{id}/reply), the
// others plain sends to the chat (receive_id_type chat_id for groups,
// open_id for private chats). Media are sent as image messages by the
// image_key of an image the app uploaded itself (Media.FileID "img_…");
// received media (MediaRef) and URLs cannot be sent
// (channel.ErrMediaInvalid). Each message carries the send uuid
// SendUUID(out.IdempotencyKey) (the second and later ones of one
// Outgoing with "#<n>" added to the key), so a send retried after a lost
// answer is deduplicated by the platform.
//
// Errors: channel.ErrOffline while Run reports the channel offline (no
// call is made); otherwise the classified *APIError (see its doc) or a
// plain transient error. If a later message of a multi-message send
// fails, the error comes with the receipt of the parts already
// delivered. Each call has the CallTimeout deadline.
func (c *Channel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return channel.Receipt{}, err
	}
	if c.offline.Load() {
		return channel.Receipt{}, fmt.Errorf("feishu: send: %w", channel.ErrOffline)
	}
	idType, err := receiveIDType(out.Chat)
	if err != nil {
		return channel.Receipt{}, err
	}
	if out.Text == "" && len(out.Media) == 0 {
		return channel.Receipt{}, &channel.RejectedError{Code: "empty_message", Reason: "no text and no media"}
	}
	if out.ReplyTo != "" && !validID(out.ReplyTo) {
		return channel.Receipt{}, &channel.RejectedError{Code: "bad_reply_to", Reason: fmt.Sprintf("reply target %q is not a Feishu message id", out.ReplyTo)}
	}
	for _, id := range out.Mentions {
		if !validMentionID(id) {
			return channel.Receipt{}, &channel.RejectedError{Code: "bad_mention", Reason: fmt.Sprintf("%q is not a Feishu open_id", id)}
		}
	}
	for _, m := range out.Media {
		if m.FileID == "" || !validID(m.FileID) {
			return channel.Receipt{}, fmt.Errorf("feishu: attachment %q has no image_key of an uploaded image (uploads and received media cannot be sent): %w", m.Name, channel.ErrMediaInvalid)
		}
	}
	if n := len([]rune(out.Text)); n > MaxTextRunes {
		return channel.Receipt{}, &channel.RejectedError{Code: "text_too_long", Reason: fmt.Sprintf("%d runes, the limit is %d", n, MaxTextRunes)}
	}

	type part struct{ msgType, content string }
	var parts []part
	if out.Text != "" {
		if needsPost(out.Text) {
			parts = append(parts, part{"post", postContent(out.Text, out.Mentions)})
		} else {
			parts = append(parts, part{"text", textContent(out.Text, out.Mentions, func(id string) string {
				n, _ := c.names.get(id)
				return n
			})})
		}
	}
	for _, m := range out.Media {
		c, _ := jsonString(map[string]string{"image_key": m.FileID})
		parts = append(parts, part{"image", c})
	}

	var rc channel.Receipt
	replyTo := out.ReplyTo
	for i, p := range parts {
		key := out.IdempotencyKey
		if key != "" && i > 0 {
			key += "#" + strconv.Itoa(i)
		}
		body := map[string]any{"msg_type": p.msgType, "content": p.content}
		if u := SendUUID(key); u != "" {
			body["uuid"] = u
		}
		var req request
		if replyTo != "" {
			req = request{op: "reply", method: http.MethodPost, path: "/open-apis/im/v1/messages/" + url.PathEscape(replyTo) + "/reply", body: body}
		} else {
			body["receive_id"] = out.Chat.ID
			req = request{op: "send", method: http.MethodPost, path: "/open-apis/im/v1/messages",
				query: url.Values{"receive_id_type": {idType}}, body: body}
		}
		req.media = p.msgType == "image"
		var sm sentMessage
		if _, err := c.call(ctx, req, &sm); err != nil {
			return rc, err
		}
		if !validID(sm.MessageID) {
			c.log.Error("feishu_invalid_receipt", "op", req.op, "detail", "the answer has no message_id")
			return rc, fmt.Errorf("feishu: %s: the answer has no valid message_id", req.op)
		}
		rc.MessageIDs = append(rc.MessageIDs, sm.MessageID)
		if rc.Time.IsZero() {
			rc.Time = sm.CreateTime.Time
		}
		if out.Chat.Kind == channel.Private && validID(sm.ChatID) {
			c.p2p.put(out.Chat.ID, sm.ChatID)
		}
		if p.msgType != "image" {
			c.quotes.put(sm.MessageID, channel.Quoted{MessageID: sm.MessageID, Sender: channel.Sender{ID: c.BotID()}, Text: out.Text, FromBot: true})
		}
		replyTo = ""
	}
	return rc, nil
}

// receiveIDType is the receive_id_type of a chat: chat_id for a group,
// open_id for a private chat (whose id is the peer's open_id).
func receiveIDType(chat channel.Chat) (string, error) {
	if !chat.Kind.Valid() || !validID(chat.ID) {
		return "", &channel.RejectedError{Code: "bad_chat", Reason: fmt.Sprintf("invalid chat %q", chat)}
	}
	if chat.Kind == channel.Group {
		return "chat_id", nil
	}
	return "open_id", nil
}

// learn remembers what an event tells about users, chats and messages:
// names from mentions, a private chat's chat_id, and the message for
// quotes of it.
func (c *Channel) learn(d decoded) {
	for i, id := range d.users {
		c.names.put(id, d.names[i])
	}
	if d.p2pUser != "" {
		c.p2p.put(d.p2pUser, d.p2pChat)
	}
	for _, ev := range d.events {
		c.quotes.put(ev.MessageID, channel.Quoted{MessageID: ev.MessageID, Sender: ev.Sender, Text: plainText(ev.Segments),
			Segments: ev.Segments, FromBot: ev.Kind == channel.KindSelf})
	}
}

// enrich fills in what the adapter knows beyond the event: the sender's
// name (from earlier mentions) and the quoted message (when the adapter
// saw it).
func (c *Channel) enrich(ev *channel.Event) {
	if ev.Sender.Name == "" {
		if n, ok := c.names.get(ev.Sender.ID); ok {
			ev.Sender.Name = n
		}
	}
	if id := ev.QuoteID(); id != "" {
		if q, ok := c.quotes.get(id); ok {
			q.Segments = append([]channel.Segment(nil), q.Segments...)
			ev.Quoted = &q
		}
	}
}

// jsonString marshals v into a string.
func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// lru is a small bounded map that forgets its oldest entries.
type lru[V any] struct {
	mu    sync.Mutex
	max   int
	m     map[string]V
	order []string
}

func newLRU[V any](n int) *lru[V] { return &lru[V]{max: n, m: make(map[string]V)} }

func (l *lru[V]) put(k string, v V) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[k]; !ok {
		l.order = append(l.order, k)
	}
	l.m[k] = v
	for len(l.order) > l.max {
		delete(l.m, l.order[0])
		l.order = l.order[1:]
	}
}

func (l *lru[V]) get(k string) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.m[k]
	return v, ok
}
