package telegram

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// ErrRunning is returned by Run while another Run of the same Channel is
// active.
var ErrRunning = errors.New("telegram: already running")

// ErrNotMember is wrapped by LookupMember when the user left or was
// removed from the chat.
var ErrNotMember = errors.New("telegram: not a member of the chat")

// maxNames bounds the user-name cache used to render mentions.
const maxNames = 4096

// Channel is a Telegram Bot API adapter: a channel.Channel that receives
// updates by long polling or webhook and sends through the Bot API. It
// implements channel.Typer, channel.Recaller, channel.MemberLookup,
// channel.TextLimiter and channel.MediaFetcher, and is an http.Handler for
// webhook mode.
//
// Create it with New. All methods are safe for concurrent use; Run may be
// active at most once at a time.
type Channel struct {
	cfg     Config
	token   string
	apiBase string
	http    *http.Client
	clk     clock.Clock
	log     *slog.Logger
	store   OffsetStore
	jitter  func() float64 // in [0, 1); tests may replace it

	running atomic.Bool
	// active is set while Run is active and the bot is known: the webhook
	// handler delivers only then.
	active atomic.Pointer[activeRun]
	// offline is set while Run reports the channel offline; Send then
	// fails fast with channel.ErrOffline.
	offline atomic.Bool
	addr    atomic.Pointer[string]

	mu    sync.Mutex
	bot   botInfo
	names map[int64]string // user id → display name, for mentions
	order []int64          // insertion order of names, for eviction
}

type activeRun struct {
	sink channel.Sink
	bot  botInfo
}

// Compile-time checks of the capabilities.
var (
	_ channel.Channel      = (*Channel)(nil)
	_ channel.Typer        = (*Channel)(nil)
	_ channel.Recaller     = (*Channel)(nil)
	_ channel.MemberLookup = (*Channel)(nil)
	_ channel.TextLimiter  = (*Channel)(nil)
	_ channel.MediaFetcher = (*Channel)(nil)
	_ http.Handler         = (*Channel)(nil)
)

// New validates cfg and returns a Channel. It does no network I/O; with
// Config.StateDir set (and no OffsetStore) it creates the directory.
func New(cfg Config) (*Channel, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	store := cfg.OffsetStore
	if store == nil && cfg.Mode == ModePolling {
		if cfg.StateDir != "" {
			fs, err := NewFileOffsetStore(cfg.StateDir)
			if err != nil {
				return nil, fmt.Errorf("telegram: invalid config: StateDir: %w", err)
			}
			store = fs
		} else {
			store = NewMemoryOffsetStore()
		}
	}
	return &Channel{
		cfg:     cfg,
		token:   cfg.Token,
		apiBase: cfg.APIBase,
		http:    cfg.HTTPClient,
		clk:     cfg.Clock,
		log:     cfg.Logger.With("platform", Platform),
		store:   store,
		jitter:  rand.Float64,
		names:   make(map[int64]string),
	}, nil
}

// Name returns "telegram".
func (c *Channel) Name() string { return Platform }

// Shareable reports true in ModeWebhook (channel.Shareable): Telegram
// posts each update to whichever process its webhook URL reaches, and
// sends are plain Bot API calls, so several processes may run the
// channel at once. Long polling is not shareable: getUpdates serves one
// client at a time.
func (c *Channel) Shareable() bool { return c.cfg.Mode == ModeWebhook }

// BotID returns the bot's numeric user id as a string, known once Run's
// getMe succeeded ("" before).
func (c *Channel) BotID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bot.idStr
}

// Username returns the bot's username (without '@'), known once Run's
// getMe succeeded.
func (c *Channel) Username() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bot.username
}

// WebhookAddr returns the address the webhook server listens on while Run
// is active with WebhookConfig.Addr set (useful with port 0), else "".
func (c *Channel) WebhookAddr() string {
	if p := c.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// TextLimit is 4096 UTF-16 code units, the Bot API message limit.
func (c *Channel) TextLimit() channel.TextLimit {
	return channel.TextLimit{Unit: channel.UTF16, Max: MaxTextUTF16}
}

// rememberUsers caches display names for mention rendering.
func (c *Channel) rememberUsers(us []tgUser) {
	if len(us) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, u := range us {
		n := userName(&u)
		if n == "" || !validUserID(u.ID) {
			continue
		}
		if _, ok := c.names[u.ID]; !ok {
			c.order = append(c.order, u.ID)
		}
		c.names[u.ID] = n
	}
	for len(c.order) > maxNames {
		delete(c.names, c.order[0])
		c.order = c.order[1:]
	}
}

func (c *Channel) nameOf(id int64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[id]
}

// chatIDParam renders a chat id for the Bot API: numeric ids (nonzero, at
// most 52 bits) as numbers, "@channelusername" as a string.
func chatIDParam(chat channel.Chat) (any, error) {
	if !chat.Kind.Valid() || chat.ID == "" {
		return nil, &channel.RejectedError{Code: "bad_chat", Reason: fmt.Sprintf("invalid chat %q", chat)}
	}
	if id, err := strconv.ParseInt(chat.ID, 10, 64); err == nil {
		if !validChatID(id) {
			return nil, &channel.RejectedError{Code: "bad_chat", Reason: fmt.Sprintf("chat id %s is out of the Bot API's range", chat.ID)}
		}
		return id, nil
	}
	if strings.HasPrefix(chat.ID, "@") && len(chat.ID) > 1 {
		return chat.ID, nil
	}
	return nil, &channel.RejectedError{Code: "bad_chat", Reason: fmt.Sprintf("chat id %q is neither numeric nor @username", chat.ID)}
}

// sentMessage is the part of a sent Message the adapter reads.
type sentMessage struct {
	MessageID int64 `json:"message_id"`
	Date      int64 `json:"date"`
}

// Send delivers out and returns the ids of the message(s) it produced.
//
// Text goes out with sendMessage (no parse_mode: the text is sent
// verbatim), ReplyTo as reply_parameters on the first message. Mentions
// are rendered as text_mention entities over the user's display name,
// placed before the text ("Alice Bob text"); a name comes from messages
// the adapter has seen or, failing that, getChatMember; a mention whose
// name cannot be found is left out and logged. Media are sent with
// sendPhoto (image/*), sendVoice (audio/ogg, audio/opus), sendAudio (other
// audio/*), sendVideo (video/*) or sendDocument, by file_id or http(s)
// URL (uploads are not supported: channel.ErrMediaInvalid). A single
// attachment with a text of at most 1024 UTF-16 units carries the text as
// its caption; otherwise the text goes first and each attachment follows.
// If a later call of a multi-call send fails, the error comes with the
// receipt of the parts already delivered. IdempotencyKey is not used (the
// Bot API has no client-side dedupe key).
//
// Errors: channel.ErrOffline while Run reports the channel offline (no
// call is made); otherwise the classified *APIError (see its doc) or a
// plain transient error for network failures. Each call has the
// CallTimeout deadline.
func (c *Channel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return channel.Receipt{}, err
	}
	if c.offline.Load() {
		return channel.Receipt{}, fmt.Errorf("telegram: send: %w", channel.ErrOffline)
	}
	chatID, err := chatIDParam(out.Chat)
	if err != nil {
		return channel.Receipt{}, err
	}
	if out.Text == "" && len(out.Media) == 0 {
		return channel.Receipt{}, &channel.RejectedError{Code: "empty_message", Reason: "no text and no media"}
	}
	var reply *replyParameters
	if out.ReplyTo != "" {
		id, err := strconv.ParseInt(out.ReplyTo, 10, 64)
		if err != nil || !validMessageID(id) {
			return channel.Receipt{}, &channel.RejectedError{Code: "bad_reply_to", Reason: fmt.Sprintf("reply target %q is not a Telegram message id", out.ReplyTo)}
		}
		reply = &replyParameters{MessageID: id}
	}
	for _, m := range out.Media {
		if m.FileID == "" && !isHTTPURL(m.URL) {
			return channel.Receipt{}, fmt.Errorf("telegram: attachment %q has no file_id or http(s) URL (uploads are not supported): %w", m.Name, channel.ErrMediaInvalid)
		}
	}

	text, ents := out.Text, []tgEntity(nil)
	if len(out.Mentions) > 0 {
		var prefix string
		prefix, ents = c.renderMentions(ctx, chatID, out.Mentions)
		text = prefix + text
	}

	// sendMessage and sendMedia check the message id of what they sent.
	var rc channel.Receipt
	add := func(m sentMessage) {
		rc.MessageIDs = append(rc.MessageIDs, strconv.FormatInt(m.MessageID, 10))
		if rc.Time.IsZero() && m.Date > 0 {
			rc.Time = time.Unix(m.Date, 0)
		}
	}
	if len(out.Media) == 1 && utf16Len(text) <= MaxCaptionUTF16 {
		m, err := c.sendMedia(ctx, chatID, out.Media[0], text, ents, reply)
		if err != nil {
			return rc, err
		}
		add(m)
		return rc, nil
	}
	if text != "" {
		if n := utf16Len(text); n > MaxTextUTF16 {
			return rc, &channel.RejectedError{Code: "text_too_long", Reason: fmt.Sprintf("%d UTF-16 units, the limit is %d", n, MaxTextUTF16)}
		}
		var m sentMessage
		p := sendParams{ChatID: chatID, Text: text, Entities: ents, ReplyParameters: reply}
		if err := c.call(ctx, "sendMessage", p, c.cfg.CallTimeout, &m); err != nil {
			return rc, err
		}
		if err := c.checkSent("sendMessage", m); err != nil {
			return rc, err
		}
		add(m)
		reply = nil
	}
	for _, md := range out.Media {
		m, err := c.sendMedia(ctx, chatID, md, "", nil, reply)
		if err != nil {
			return rc, err
		}
		add(m)
		reply = nil
	}
	return rc, nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// sendMedia sends one attachment with an optional caption.
func (c *Channel) sendMedia(ctx context.Context, chatID any, m channel.Media, caption string, ents []tgEntity, reply *replyParameters) (sentMessage, error) {
	ref := m.FileID
	if ref == "" {
		ref = m.URL
	}
	p := sendParams{ChatID: chatID, Caption: caption, CaptionEntities: ents, ReplyParameters: reply}
	mt := m.MIME
	if mt == "" && m.URL != "" {
		if u, err := url.Parse(m.URL); err == nil {
			mt = mime.TypeByExtension(path.Ext(u.Path))
		}
	}
	mt, _, _ = strings.Cut(strings.ToLower(mt), ";")
	var method string
	switch {
	case strings.HasPrefix(mt, "image/"):
		method, p.Photo = "sendPhoto", ref
	case mt == "audio/ogg" || mt == "audio/opus":
		method, p.Voice = "sendVoice", ref
	case strings.HasPrefix(mt, "audio/"):
		method, p.Audio = "sendAudio", ref
	case strings.HasPrefix(mt, "video/"):
		method, p.Video = "sendVideo", ref
	default:
		method, p.Document = "sendDocument", ref
	}
	var sm sentMessage
	if err := c.call(ctx, method, p, c.cfg.CallTimeout, &sm); err != nil {
		return sentMessage{}, err
	}
	return sm, c.checkSent(method, sm)
}

// renderMentions builds the "Name Name " prefix and its text_mention
// entities. Offsets are UTF-16 code units.
func (c *Channel) renderMentions(ctx context.Context, chatID any, ids []string) (string, []tgEntity) {
	var sb strings.Builder
	var ents []tgEntity
	off := 0
	for _, s := range ids {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || !validUserID(id) {
			c.log.Warn("telegram_mention_dropped", "user_id", s, "reason", "not a Telegram user id")
			continue
		}
		name := c.nameOf(id)
		if name == "" {
			name = c.lookupName(ctx, chatID, id)
		}
		if name == "" {
			c.log.Warn("telegram_mention_dropped", "user_id", s, "reason", "display name unknown")
			continue
		}
		n := utf16Len(name)
		ents = append(ents, tgEntity{Type: "text_mention", Offset: off, Length: n, User: &tgUser{ID: id, FirstName: name}})
		sb.WriteString(name)
		sb.WriteByte(' ')
		off += n + 1
	}
	return sb.String(), ents
}

func (c *Channel) lookupName(ctx context.Context, chatID any, userID int64) string {
	var m tgChatMember
	if err := c.call(ctx, "getChatMember", map[string]any{"chat_id": chatID, "user_id": userID}, c.cfg.CallTimeout, &m); err != nil {
		c.log.Debug("telegram_get_chat_member_failed", "user_id", userID, "err", err)
		return ""
	}
	if m.User == nil {
		return ""
	}
	c.rememberUsers([]tgUser{*m.User})
	return userName(m.User)
}

// Typing shows "typing…" in chat with sendChatAction. Telegram clears it
// after 5 s or when the bot's message arrives, so callers refresh it about
// every 4–5 s while generating.
func (c *Channel) Typing(ctx context.Context, chat channel.Chat) error {
	if c.offline.Load() {
		return fmt.Errorf("telegram: typing: %w", channel.ErrOffline)
	}
	chatID, err := chatIDParam(chat)
	if err != nil {
		return err
	}
	return c.call(ctx, "sendChatAction", map[string]any{"chat_id": chatID, "action": "typing"}, c.cfg.CallTimeout, nil)
}

// Recall deletes a message with deleteMessage (Telegram allows it for
// messages younger than 48 h).
func (c *Channel) Recall(ctx context.Context, chat channel.Chat, messageID string) error {
	if c.offline.Load() {
		return fmt.Errorf("telegram: recall: %w", channel.ErrOffline)
	}
	chatID, err := chatIDParam(chat)
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(messageID, 10, 64)
	if err != nil || !validMessageID(id) {
		return &channel.RejectedError{Code: "bad_message_id", Reason: fmt.Sprintf("%q is not a Telegram message id", messageID)}
	}
	return c.call(ctx, "deleteMessage", map[string]any{"chat_id": chatID, "message_id": id}, c.cfg.CallTimeout, nil)
}

// LookupMember asks getChatMember. Role: creator → owner, administrator →
// admin, member and restricted → member; Level is not known on Telegram. A
// user who left or was banned yields an error wrapping ErrNotMember.
func (c *Channel) LookupMember(ctx context.Context, chat channel.Chat, userID string) (channel.Member, error) {
	if c.offline.Load() {
		return channel.Member{}, fmt.Errorf("telegram: member lookup: %w", channel.ErrOffline)
	}
	chatID, err := chatIDParam(chat)
	if err != nil {
		return channel.Member{}, err
	}
	uid, err := strconv.ParseInt(userID, 10, 64)
	if err != nil || !validUserID(uid) {
		return channel.Member{}, &channel.RejectedError{Code: "bad_user_id", Reason: fmt.Sprintf("%q is not a Telegram user id", userID)}
	}
	var m tgChatMember
	if err := c.call(ctx, "getChatMember", map[string]any{"chat_id": chatID, "user_id": uid}, c.cfg.CallTimeout, &m); err != nil {
		return channel.Member{}, err
	}
	mem := channel.Member{UserID: userID}
	if m.User != nil {
		mem.Name = userName(m.User)
		c.rememberUsers([]tgUser{*m.User})
	}
	switch m.Status {
	case "creator":
		mem.Role = channel.RoleOwner
	case "administrator":
		mem.Role = channel.RoleAdmin
	case "member", "restricted":
		mem.Role = channel.RoleMember
	default:
		return channel.Member{}, fmt.Errorf("telegram: user %s in %s has status %q: %w", userID, chat, m.Status, ErrNotMember)
	}
	return mem, nil
}
