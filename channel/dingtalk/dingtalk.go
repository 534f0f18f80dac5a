package dingtalk

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// ErrRunning is returned by Run while another Run of the same Channel is
// active.
var ErrRunning = errors.New("dingtalk: already running")

// Channel is a DingTalk Stream-mode robot adapter: a channel.Channel that
// receives robot messages over a Stream connection and sends through the
// conversation's session webhook or the robot OpenAPI. It implements
// channel.TextLimiter and channel.MediaFetcher.
//
// Create it with New. All methods are safe for concurrent use; Run may be
// active at most once at a time.
type Channel struct {
	cfg    Config
	log    *slog.Logger
	jitter func() float64 // in [0, 1); tests may replace it

	secrets  secretSet
	tok      tokenCache
	sessions sessions
	quotes   quotes

	running atomic.Bool
	// offline is set while Run is active and no stream connection is up;
	// Send then fails fast with channel.ErrOffline.
	offline atomic.Bool
}

// Compile-time checks of the capabilities.
var (
	_ channel.Channel      = (*Channel)(nil)
	_ channel.TextLimiter  = (*Channel)(nil)
	_ channel.MediaFetcher = (*Channel)(nil)
)

// New validates cfg and returns a Channel. It does no network I/O.
func New(cfg Config) (*Channel, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Channel{cfg: cfg, log: cfg.Logger.With("platform", Platform), jitter: rand.Float64}
	c.secrets.pin(cfg.ClientSecret)
	return c, nil
}

// Name returns "dingtalk".
func (c *Channel) Name() string { return Platform }

// BotID returns the robot code, the bot's id in events (Config.RobotCode,
// by default the Client ID).
func (c *Channel) BotID() string { return c.cfg.RobotCode }

// TextLimit is 4000 runes (MaxTextRunes), well under the 20,000 bytes a
// robot message may carry.
func (c *Channel) TextLimit() channel.TextLimit {
	return channel.TextLimit{Unit: channel.Runes, Max: MaxTextRunes}
}

// rendered is an outgoing message in DingTalk's terms.
type rendered struct {
	markdown      bool
	title         string
	text          string
	atUserIDs     []string
	atDingtalkIDs []string
}

// Send delivers out and returns its receipt.
//
// Route: while the conversation has a session webhook (learned from the
// last message received in it) valid for more than Config.WebhookMargin,
// the message is posted to it; otherwise it goes through the robot
// OpenAPI with the app's access token: groupMessages/send for a group
// (openConversationId = the chat id), oToMessages/batchSend for a private
// chat (userIds = the chat id, a staff id). A session webhook that answers
// 404 or 410 is forgotten and the OpenAPI is used at once.
//
// Rendering: plain text ("text", or "sampleText" over the OpenAPI), or
// markdown when Config.Markdown is set, when the message carries pictures
// (each Outgoing.Media must be an http(s) image link; it is shown as a
// markdown image) or when it quotes: a reply (Outgoing.ReplyTo) to a
// message the adapter has seen opens with a blockquote of that message
// ("> Alice: first words…") unless Config.PlainReplies is set, since
// DingTalk robots have no quote reference. Mentions (Outgoing.Mentions,
// staff ids, or dingtalk ids "$:LWCP_v1:…") are sent through the session
// webhook only, as "@id " before the text plus at.atUserIds /
// at.atDingtalkIds; the robot OpenAPI cannot mention, so there they are
// left out and logged.
//
// Receipt: the OpenAPI's processQueryKey; a session webhook answers no
// id, so the receipt holds a stable id derived from
// Outgoing.IdempotencyKey ("dt-" and 32 hex digits; random without a key),
// the same for every attempt of the same chunk.
//
// Errors: channel.ErrOffline while Run is active without a stream
// connection (no call is made; without Run, Send works on its own); a
// *channel.RejectedError for an empty message, a text over
// MaxMessageBytes (or, through the robot API, a msgParam over
// MaxAPIParamBytes), a private chat without a staff id and no webhook,
// or a definitive platform answer; channel.ErrMediaInvalid for media
// that are not image links; otherwise the classified *APIError (see its
// doc) or a plain transient error. A 2xx answer whose body cannot be
// read counts as sent (logged as dingtalk_answer_malformed). Every call
// has the CallTimeout deadline.
func (c *Channel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return channel.Receipt{}, err
	}
	if c.offline.Load() {
		return channel.Receipt{}, fmt.Errorf("dingtalk: send: %w", channel.ErrOffline)
	}
	if !out.Chat.Kind.Valid() || out.Chat.ID == "" || len(out.Chat.ID) > maxID {
		return channel.Receipt{}, &channel.RejectedError{Code: "bad_chat", Reason: fmt.Sprintf("invalid chat %q", out.Chat)}
	}
	if strings.TrimSpace(out.Text) == "" && len(out.Media) == 0 {
		return channel.Receipt{}, &channel.RejectedError{Code: "empty_message", Reason: "no text and no media"}
	}
	if !utf8.ValidString(out.Text) {
		return channel.Receipt{}, &channel.RejectedError{Code: "bad_text", Reason: "the text is not valid UTF-8"}
	}
	for _, m := range out.Media {
		if err := sendableImage(m); err != nil {
			return channel.Receipt{}, err
		}
	}

	now := c.cfg.Clock.Now()
	rc := channel.Receipt{Time: now}
	if w, ok := c.sessions.get(out.Chat, now, c.cfg.WebhookMargin); ok {
		r := c.render(out, true)
		if err := checkSize(r); err != nil {
			return channel.Receipt{}, err
		}
		err := c.postWebhook(ctx, w, r)
		var ae *APIError
		switch {
		case err == nil:
			rc.MessageIDs = []string{c.receiptID(out.IdempotencyKey)}
			c.remember(rc.MessageIDs[0], out)
			return rc, nil
		case errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusGone):
			c.sessions.drop(out.Chat, w.url)
			c.log.Info("dingtalk_webhook_gone", "chat", out.Chat.String(), "status", ae.Status, "effect", "sending through the robot API")
		default:
			return channel.Receipt{}, err
		}
	}

	r := c.render(out, false)
	if err := checkSize(r); err != nil {
		return channel.Receipt{}, err
	}
	if len(out.Mentions) > 0 {
		c.log.Debug("dingtalk_mentions_dropped", "chat", out.Chat.String(), "count", len(out.Mentions),
			"reason", "no session webhook; the robot API cannot mention")
	}
	key, err := c.sendAPI(ctx, out.Chat, r)
	if err != nil {
		return channel.Receipt{}, err
	}
	if key == "" {
		key = c.receiptID(out.IdempotencyKey)
	}
	rc.MessageIDs = []string{key}
	c.remember(key, out)
	return rc, nil
}

// remember keeps a sent text for the quote of a later reply to it.
func (c *Channel) remember(id string, out channel.Outgoing) {
	c.quotes.put(id, quote{chat: out.Chat, text: out.Text})
}

// receiptID is the id of a message sent through a session webhook, which
// answers none: derived from the idempotency key, else random.
func (c *Channel) receiptID(key string) string {
	if key != "" {
		sum := sha256.Sum256([]byte(key))
		return "dt-" + hex.EncodeToString(sum[:16])
	}
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	return "dt-" + hex.EncodeToString(b[:])
}

// sendableImage checks that a medium can be shown in a markdown message:
// an http(s) link to a picture.
func sendableImage(m channel.Media) error {
	u, err := url.Parse(m.URL)
	if m.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("dingtalk: attachment %q has no http(s) link (DingTalk robots send pictures by link only): %w", m.Name, channel.ErrMediaInvalid)
	}
	if m.MIME != "" && !strings.HasPrefix(strings.ToLower(m.MIME), "image/") {
		return fmt.Errorf("dingtalk: attachment %q is %s; only pictures can be sent: %w", m.Name, m.MIME, channel.ErrMediaInvalid)
	}
	return nil
}

// checkSize refuses a message over MaxMessageBytes.
func checkSize(r rendered) error {
	if n := len(r.text) + len(r.title); n > MaxMessageBytes {
		return &channel.RejectedError{Code: "text_too_long", Reason: fmt.Sprintf("%d bytes, a robot message carries at most %d", n, MaxMessageBytes)}
	}
	return nil
}

// render builds the message; mentions only when it goes through a
// session webhook.
func (c *Channel) render(out channel.Outgoing, viaWebhook bool) rendered {
	r := rendered{markdown: c.cfg.Markdown || len(out.Media) > 0}
	var b strings.Builder
	if out.ReplyTo != "" && !c.cfg.PlainReplies {
		if q, ok := c.quotes.get(out.ReplyTo); ok && q.chat == out.Chat {
			r.markdown = true
			b.WriteString("> ")
			if q.name != "" {
				b.WriteString(q.name)
				b.WriteString(": ")
			}
			b.WriteString(excerpt(q.text, quoteRunes))
			b.WriteString("\n\n")
		} else {
			c.log.Debug("dingtalk_quote_unknown", "reply_to", out.ReplyTo, "effect", "sent without the quote")
		}
	}
	if viaWebhook {
		seen := map[string]bool{}
		for _, id := range out.Mentions {
			if id == "" || seen[id] || len(id) > maxID || strings.ContainsFunc(id, func(r rune) bool { return isControl(r) || r == ' ' }) {
				continue
			}
			seen[id] = true
			if strings.HasPrefix(id, "$:") {
				r.atDingtalkIDs = append(r.atDingtalkIDs, id)
			} else {
				r.atUserIDs = append(r.atUserIDs, id)
			}
			b.WriteString("@" + id + " ")
		}
	}
	b.WriteString(out.Text)
	for _, m := range out.Media {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("![image](" + markdownURL(m.URL) + ")")
	}
	r.text = b.String()
	if r.markdown {
		r.title = title(out.Text)
	}
	return r
}

// quoteRunes bounds the excerpt of a quoted message; titleRunes a
// markdown title.
const (
	quoteRunes = 30
	titleRunes = 20
)

// excerpt is the first non-empty line of s, at most n runes (cut with
// "…").
func excerpt(s string, n int) string {
	line := ""
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			line = l
			break
		}
	}
	if utf8.RuneCountInString(line) <= n {
		return line
	}
	rs := []rune(line)
	return strings.TrimSpace(string(rs[:n])) + "…"
}

// title is the markdown title (shown in notifications and the chat list):
// the start of the text, or "[image]".
func title(text string) string {
	if t := excerpt(text, titleRunes); t != "" {
		return t
	}
	return "[image]"
}

// markdownURL escapes the characters that would end a markdown link.
func markdownURL(u string) string {
	return strings.NewReplacer(" ", "%20", "(", "%28", ")", "%29").Replace(u)
}

// postWebhook posts a message to a session webhook.
func (c *Channel) postWebhook(ctx context.Context, w webhook, r rendered) error {
	body := map[string]any{}
	if r.markdown {
		body["msgtype"] = "markdown"
		body["markdown"] = map[string]string{"title": r.title, "text": r.text}
	} else {
		body["msgtype"] = "text"
		body["text"] = map[string]string{"content": r.text}
	}
	if len(r.atUserIDs) > 0 || len(r.atDingtalkIDs) > 0 {
		at := map[string]any{"isAtAll": false}
		if len(r.atUserIDs) > 0 {
			at["atUserIds"] = r.atUserIDs
		}
		if len(r.atDingtalkIDs) > 0 {
			at["atDingtalkIds"] = r.atDingtalkIDs
		}
		body["at"] = at
	}
	return c.do(ctx, call{op: "sessionWebhook", url: w.url, body: body, sent: true})
}

// sendAPI sends through the robot OpenAPI and returns the
// processQueryKey.
func (c *Channel) sendAPI(ctx context.Context, chat channel.Chat, r rendered) (string, error) {
	msgKey, param := "sampleText", map[string]string{"content": r.text}
	if r.markdown {
		msgKey, param = "sampleMarkdown", map[string]string{"title": r.title, "text": r.text}
	}
	msgParam, err := json.Marshal(param)
	if err != nil {
		return "", fmt.Errorf("dingtalk: encoding msgParam: %w", err)
	}
	if len(msgParam) > MaxAPIParamBytes {
		return "", &channel.RejectedError{Code: "text_too_long",
			Reason: fmt.Sprintf("%d bytes of msgParam, the robot API takes at most %d", len(msgParam), MaxAPIParamBytes)}
	}
	if chat.Kind == channel.Group {
		var res struct {
			ProcessQueryKey string `json:"processQueryKey"`
		}
		err := c.apiCall(ctx, call{op: "groupMessages/send", url: c.cfg.APIBase + "/v1.0/robot/groupMessages/send",
			body: map[string]string{"robotCode": c.cfg.RobotCode, "openConversationId": chat.ID,
				"msgKey": msgKey, "msgParam": string(msgParam)}, result: &res, sent: true})
		return res.ProcessQueryKey, err
	}
	if strings.HasPrefix(chat.ID, "$:") {
		return "", &channel.RejectedError{Code: "no_route",
			Reason: "the user has no staff id and the conversation no valid session webhook; the robot API cannot reach them"}
	}
	var res struct {
		ProcessQueryKey           string   `json:"processQueryKey"`
		InvalidStaffIDList        []string `json:"invalidStaffIdList"`
		FlowControlledStaffIDList []string `json:"flowControlledStaffIdList"`
	}
	err = c.apiCall(ctx, call{op: "oToMessages/batchSend", url: c.cfg.APIBase + "/v1.0/robot/oToMessages/batchSend",
		body: map[string]any{"robotCode": c.cfg.RobotCode, "userIds": []string{chat.ID},
			"msgKey": msgKey, "msgParam": string(msgParam)}, result: &res, sent: true})
	switch {
	case err != nil:
		return "", err
	case slices.Contains(res.FlowControlledStaffIDList, chat.ID):
		return "", &APIError{Op: "oToMessages/batchSend", Status: http.StatusOK, Code: "flowControlledStaffIdList",
			classes: []error{&channel.RateLimitedError{RetryAfter: c.cfg.ThrottleRetry}}}
	case slices.Contains(res.InvalidStaffIDList, chat.ID):
		return "", &APIError{Op: "oToMessages/batchSend", Status: http.StatusOK, Code: "invalidStaffIdList",
			classes: []error{&channel.RejectedError{Code: "invalidStaffIdList", Reason: "DingTalk does not know the user " + chat.ID}}}
	}
	return res.ProcessQueryKey, nil
}
