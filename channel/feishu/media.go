package feishu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/personakit/persona/channel"
)

// Resource API codes [doc "获取消息中的资源文件"].
const (
	codeResourceTooLarge = 234037 // over the 100 MB download limit
	codeResourceRetry    = 234019 // app permissions not loaded: retry
)

// FetchMedia downloads a received image, file, voice clip or video with
// the resource API (GET /open-apis/im/v1/messages/{message_id}/resources/
// {file_key}?type=image|file, with the tenant token; the app needs
// im:message or im:message:readonly) and hands the stream over as
// MediaContent.Body with the declared Content-Type and length. m.FileID
// must be a MediaRef, as events carry it.
//
// Stickers cannot be downloaded (the platform does not offer them), nor
// can anything that is not a MediaRef: channel.ErrMediaUnavailable. A
// refusal of the platform (deleted message, resource not in the message,
// bot no longer in the chat, restricted mode, …) is
// channel.ErrMediaUnavailable; the 100 MB limit and a declared length
// over req.MaxBytes are channel.ErrMediaTooLarge; rate limits, 5xx and
// network failures may be retried. The CallTimeout deadline applies
// until the answer's headers; the body is read under the caller's ctx.
func (c *Channel) FetchMedia(ctx context.Context, chat channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	msgID, key, ok := ParseMediaRef(m.FileID)
	if !ok || !validID(msgID) || !validID(key) {
		return channel.MediaContent{}, fmt.Errorf("feishu: %q is not a reference to received media: %w", m.FileID, channel.ErrMediaUnavailable)
	}
	if req.Type == channel.SegSticker {
		return channel.MediaContent{}, fmt.Errorf("feishu: stickers cannot be downloaded: %w", channel.ErrMediaUnavailable)
	}
	typ := "file"
	if req.Type == channel.SegImage || req.Type == "" && isImageKey(key) {
		typ = "image"
	}
	path := "/open-apis/im/v1/messages/" + url.PathEscape(msgID) + "/resources/" + url.PathEscape(key)
	for attempt := 0; ; attempt++ {
		tok, err := c.tokens.get(ctx)
		if err != nil {
			return channel.MediaContent{}, err
		}
		mc, err := c.download(ctx, path, typ, tok, req.MaxBytes)
		var ae *APIError
		if attempt == 0 && errors.As(err, &ae) && isTokenCode(ae.Code) {
			c.tokens.invalidate(tok)
			continue
		}
		return mc, err
	}
}

// isImageKey reports whether a resource key names an image (img_…).
func isImageKey(key string) bool { return len(key) > 4 && key[:4] == "img_" }

func (c *Channel) download(ctx context.Context, path, typ, tok string, maxBytes int64) (channel.MediaContent, error) {
	dctx, cancel := context.WithCancel(ctx)
	hr, err := http.NewRequestWithContext(dctx, http.MethodGet, c.cfg.BaseURL+path+"?type="+typ, nil)
	if err != nil {
		cancel()
		return channel.MediaContent{}, fmt.Errorf("feishu: resource: %w", err)
	}
	hr.Header.Set("Authorization", "Bearer "+tok)
	headers := time.AfterFunc(c.cfg.CallTimeout, cancel) // the deadline until the headers arrive
	resp, err := c.cfg.HTTPClient.Do(hr)
	stopped := headers.Stop()
	if err != nil || !stopped {
		cancel()
		if err == nil {
			_ = resp.Body.Close()
			err = context.DeadlineExceeded
		}
		return channel.MediaContent{}, fmt.Errorf("feishu: resource: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer func() { _ = resp.Body.Close() }()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var env envelope
		code, msg := 0, ""
		if json.Unmarshal(data, &env) == nil && env.Code != nil {
			code, msg = *env.Code, env.Msg
		}
		ae := newAPIError("resource", resp.StatusCode, code, msg, rateLimitReset(resp.Header), false)
		switch {
		case isTokenCode(code) || channel.Classify(ae) == channel.ClassRateLimited || code == codeResourceRetry || resp.StatusCode/100 == 5:
			return channel.MediaContent{}, ae
		case code == codeResourceTooLarge:
			return channel.MediaContent{}, fmt.Errorf("%w: %w", channel.ErrMediaTooLarge, ae)
		case resp.StatusCode/100 == 4:
			return channel.MediaContent{}, fmt.Errorf("%w: %w", channel.ErrMediaUnavailable, ae)
		}
		return channel.MediaContent{}, ae
	}
	if maxBytes > 0 && resp.ContentLength > maxBytes {
		cancel()
		_ = resp.Body.Close()
		return channel.MediaContent{}, fmt.Errorf("feishu: resource of %d bytes, over %d: %w", resp.ContentLength, maxBytes, channel.ErrMediaTooLarge)
	}
	size := max(resp.ContentLength, 0)
	return channel.MediaContent{Body: &cancelBody{ReadCloser: resp.Body, cancel: cancel}, MIME: resp.Header.Get("Content-Type"), Size: size}, nil
}

// cancelBody releases the request's context when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close closes the body and cancels the request.
func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// historyPageMax is the largest page the message list API returns.
const historyPageMax = 50

// historyTimeout is the deadline of a history call (15 s: history calls get longer than the 10 s of other calls).
const historyTimeout = 15 * time.Second

// FetchHistory reads one page of a chat's messages, newest first, with
// the message list API (GET /open-apis/im/v1/messages, container_id_type
// chat, sort_type ByCreateTimeDesc; the app needs
// im:message.group_msg for groups' messages that do not mention it, or
// im:message:readonly / im:message.history:readonly). Pages hold at most
// 50 messages; the cursor is the API's page_token. The app's own messages
// are KindSelf events (this is how the delivery ledger finds a chunk whose
// answer was lost); deleted and unreadable messages are left out.
//
// A private chat is read by its chat_id, which the adapter learns from
// the messages and sends of that chat since it started; for a private
// chat it has not seen, FetchHistory fails.
func (c *Channel) FetchHistory(ctx context.Context, q channel.HistoryQuery) (channel.HistoryPage, error) {
	if c.offline.Load() {
		return channel.HistoryPage{}, fmt.Errorf("feishu: history: %w", channel.ErrOffline)
	}
	if _, err := receiveIDType(q.Chat); err != nil {
		return channel.HistoryPage{}, err
	}
	container := q.Chat.ID
	if q.Chat.Kind == channel.Private {
		id, ok := c.p2p.get(q.Chat.ID)
		if !ok {
			return channel.HistoryPage{}, fmt.Errorf("feishu: history of %s: the private chat's chat_id is not known yet", q.Chat)
		}
		container = id
	}
	limit := q.Limit
	if limit <= 0 || limit > historyPageMax {
		limit = historyPageMax
	}
	query := url.Values{"container_id_type": {"chat"}, "container_id": {container}, "sort_type": {"ByCreateTimeDesc"},
		"page_size": {fmt.Sprint(limit)}}
	if q.Cursor != "" {
		query.Set("page_token", q.Cursor)
	}
	var page struct {
		HasMore   bool          `json:"has_more"`
		PageToken string        `json:"page_token"`
		Items     []historyItem `json:"items"`
	}
	req := request{op: "history", method: http.MethodGet, path: "/open-apis/im/v1/messages", query: query, timeout: historyTimeout}
	if _, err := c.call(ctx, req, &page); err != nil {
		return channel.HistoryPage{}, err
	}
	bot := c.BotID()
	out := channel.HistoryPage{}
	for i := range page.Items {
		if ev, ok := normalizeHistory(&page.Items[i], q.Chat, bot, c.cfg.AppID); ok {
			out.Events = append(out.Events, ev)
		}
	}
	if page.HasMore && page.PageToken != "" {
		out.Next = page.PageToken
	}
	return out, nil
}
