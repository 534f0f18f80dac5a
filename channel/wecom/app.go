package wecom

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/personakit/persona/channel"
)

// appMessage is the decrypted XML of an app callback: the fields of the
// message types (text, image, voice, video, location, link) and of
// events.
type appMessage struct {
	XMLName      xml.Name `xml:"xml"`
	ToUserName   string   `xml:"ToUserName"`
	FromUserName string   `xml:"FromUserName"`
	CreateTime   int64    `xml:"CreateTime"`
	MsgType      string   `xml:"MsgType"`
	Content      string   `xml:"Content"`
	MsgID        string   `xml:"MsgId"`
	AgentID      string   `xml:"AgentID"`
	PicURL       string   `xml:"PicUrl"`
	MediaID      string   `xml:"MediaId"`
	Format       string   `xml:"Format"`
	Recognition  string   `xml:"Recognition"`
	ThumbMediaID string   `xml:"ThumbMediaId"`
	LocationX    string   `xml:"Location_X"`
	LocationY    string   `xml:"Location_Y"`
	Label        string   `xml:"Label"`
	Title        string   `xml:"Title"`
	Description  string   `xml:"Description"`
	URL          string   `xml:"Url"`
	Event        string   `xml:"Event"`
	EventKey     string   `xml:"EventKey"`
}

// appDecoded is what an app callback yields: an event, or the reason
// there is none (invalid: the message is broken; otherwise unsupported).
type appDecoded struct {
	event   *channel.Event
	skip    string
	invalid bool
	msgID   string
}

// decodeAppMessage parses the plaintext XML of an app callback. A parse
// error means the XML is malformed; otherwise the result says whether it
// yields an event.
func (c *Channel) decodeAppMessage(plain []byte) (appDecoded, error) {
	var m appMessage
	if err := xml.Unmarshal(plain, &m); err != nil {
		return appDecoded{}, fmt.Errorf("wecom: app message XML: %w", err)
	}
	return c.appEvent(&m, plain), nil
}

// validID reports whether s can be an id: non-empty, at most 256 bytes,
// without control characters or white space at its ends.
func validID(s string) bool {
	if s == "" || len(s) > 256 || strings.TrimSpace(s) != s {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// appEvent turns an app message into an event.
func (c *Channel) appEvent(m *appMessage, plain []byte) appDecoded {
	d := appDecoded{msgID: m.MsgID}
	invalid := func(format string, a ...any) appDecoded {
		d.skip, d.invalid = fmt.Sprintf(format, a...), true
		return d
	}
	if m.MsgType == "event" {
		d.skip = "event " + strconv.Quote(m.Event)
		return d
	}
	if m.AgentID != "" && m.AgentID != strconv.FormatInt(c.cfg.AgentID, 10) {
		return invalid("AgentID %q is not this app's %d", m.AgentID, c.cfg.AgentID)
	}
	if m.ToUserName != "" && m.ToUserName != c.cfg.CorpID {
		return invalid("ToUserName is not the corp id")
	}
	if !validID(m.FromUserName) {
		return invalid("FromUserName %q is not a user id", m.FromUserName)
	}
	if !validID(m.MsgID) {
		return invalid("MsgId %q is not a message id", m.MsgID)
	}
	var segs []channel.Segment
	switch m.MsgType {
	case "text":
		if m.Content == "" {
			return invalid("text message without Content")
		}
		segs = []channel.Segment{channel.Text(m.Content)}
	case "image":
		if m.MediaID == "" && m.PicURL == "" {
			return invalid("image without MediaId or PicUrl")
		}
		segs = []channel.Segment{channel.Image(channel.Media{URL: m.PicURL, FileID: m.MediaID})}
	case "voice":
		if m.MediaID == "" {
			return invalid("voice without MediaId")
		}
		md := channel.Media{FileID: m.MediaID, MIME: voiceMIME(m.Format), Transcript: m.Recognition}
		segs = []channel.Segment{{Type: channel.SegVoice, Media: &md}}
	case "video":
		if m.MediaID == "" {
			return invalid("video without MediaId")
		}
		segs = []channel.Segment{{Type: channel.SegVideo, Media: &channel.Media{FileID: m.MediaID}}}
	case "location":
		label := strings.TrimSpace(m.Label)
		if label == "" {
			label = m.LocationX + "," + m.LocationY
		}
		segs = []channel.Segment{channel.Text("[location] " + label)}
	case "link":
		if m.URL == "" {
			return invalid("link without Url")
		}
		segs = []channel.Segment{{Type: channel.SegLink, URL: m.URL, Text: m.Title}}
	default:
		d.skip = "message type " + strconv.Quote(m.MsgType)
		return d
	}
	t := c.clk.Now()
	if m.CreateTime > 0 && m.CreateTime < 1<<40 {
		t = time.Unix(m.CreateTime, 0)
	}
	raw, _ := json.Marshal(string(plain)) // the XML, as a JSON string
	ev := channel.Event{
		Platform:  Platform,
		BotID:     c.BotID(),
		Kind:      channel.KindMessage,
		Chat:      channel.Chat{Kind: channel.Private, ID: m.FromUserName},
		MessageID: m.MsgID,
		Time:      t,
		Sender:    channel.Sender{ID: m.FromUserName},
		Segments:  segs,
		ToMe:      true,
		Source:    channel.SourceLive,
		Raw:       raw,
	}
	if err := ev.Validate(); err != nil {
		return invalid("%v", err)
	}
	d.event = &ev
	return d
}

// voiceMIME maps a voice Format (amr, speex) to a MIME type.
func voiceMIME(format string) string {
	switch strings.ToLower(format) {
	case "amr":
		return "audio/amr"
	case "speex":
		return "audio/speex"
	}
	return ""
}

// serveApp handles a decrypted app callback.
func (c *Channel) serveApp(w http.ResponseWriter, r *http.Request, sink channel.Sink, plain []byte) {
	d, err := c.decodeAppMessage(plain)
	if err != nil {
		c.reject(w, r, http.StatusBadRequest, "malformed message", err)
		return
	}
	if d.event == nil {
		if d.invalid {
			c.log.Warn("wecom_message_invalid", "msg_id", d.msgID, "reason", d.skip,
				"effect", "acknowledged and dropped: redelivery cannot make it valid")
		} else {
			c.log.Info("wecom_callback_skipped", "reason", d.skip)
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	ev := *d.event
	if err := sink.HandleEvent(r.Context(), ev); err != nil {
		c.log.Warn("wecom_event_nacked", "chat", ev.Chat.String(), "message_id", ev.MessageID, "err", err,
			"effect", "answered 503; WeCom retries")
		http.Error(w, "not accepted, retry later", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// runApp is Run for ModeApp: it fetches the access token (the check that
// the corp id and secret work), reports online, and replaces the token
// before it expires; callbacks are delivered meanwhile.
func (c *Channel) runApp(ctx context.Context, r *reporter) error {
	c.sink.Store(&sinkRef{sink: r.sink})
	for {
		_, err := c.tokens.get(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			r.succeeded(ctx, "access token valid")
			at := c.tokens.refreshAt()
			if !c.sleep(ctx, at.Sub(c.clk.Now())) {
				return nil
			}
			continue
		case errors.Is(err, ErrUnauthorized):
			c.log.Error("wecom_unauthorized", "op", "gettoken", "err", err)
			return fmt.Errorf("wecom: %w", err)
		}
		fails := r.failed(ctx, "gettoken", err)
		c.log.Warn("wecom_token_failed", "err", err, "attempt", fails)
		if !c.sleep(ctx, c.backoff(fails)) {
			return nil
		}
	}
}

// appSendAnswer is the answer of message/send.
type appSendAnswer struct {
	MsgID          string `json:"msgid"`
	InvalidUser    string `json:"invaliduser"`
	UnlicensedUser string `json:"unlicenseduser"`
}

// sendApp sends one message as the app: message/send to a user (private
// chat) or appchat/send to an app group chat. ReplyTo and Mentions have
// no equivalent and are ignored.
func (c *Channel) sendApp(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	if len(out.Mentions) > 0 || out.ReplyTo != "" {
		c.log.Debug("wecom_send_simplified", "detail", "app messages cannot quote or mention; sent as plain text")
	}
	var bodies []map[string]any
	if out.Text != "" {
		bodies = append(bodies, map[string]any{"msgtype": "text", "text": map[string]string{"content": out.Text}})
	}
	for _, m := range out.Media {
		if m.FileID == "" {
			return channel.Receipt{}, fmt.Errorf("wecom: attachment %q has no media_id (uploads are not supported): %w", m.Name, channel.ErrMediaInvalid)
		}
		typ := "file"
		switch mt := strings.ToLower(m.MIME); {
		case strings.HasPrefix(mt, "image/"):
			typ = "image"
		case strings.HasPrefix(mt, "audio/"):
			typ = "voice"
		case strings.HasPrefix(mt, "video/"):
			typ = "video"
		}
		bodies = append(bodies, map[string]any{"msgtype": typ, typ: map[string]string{"media_id": m.FileID}})
	}
	// A message is one call per part (the text, then each attachment).
	// An earlier attempt of this chunk may have delivered some parts and
	// left one whose answer was lost: the delivered ones are not sent
	// again, and the uncertain one only where WeCom deduplicates it.
	key := out.IdempotencyKey
	prev, _ := c.sent.pending(key)
	rc := channel.Receipt{MessageIDs: slices.Clone(prev.parts)}
	for i := len(prev.parts); i < len(bodies); i++ {
		b := bodies[i]
		uncertain := prev.unsure && i == len(prev.parts)
		var dedupe time.Duration
		if uncertain {
			var ok bool
			if dedupe, ok = c.retryDedupe(out.Chat, prev.started); !ok {
				c.log.Warn("wecom_delivery_assumed", "chat", out.Chat.String(), "part", i,
					"detail", "an earlier attempt of this part got no answer and WeCom cannot drop a copy of it; not sending it again")
				rc.MessageIDs = append(rc.MessageIDs, prev.reqID)
				continue
			}
		}
		started := c.clk.Now()
		id, err := c.sendAppPart(ctx, out.Chat, b, dedupe)
		if err != nil {
			// Remember what this attempt achieved: the parts delivered,
			// and whether this one may have reached WeCom (now, or in the
			// earlier attempt this one repeated).
			e := sentEntry{kind: "app", chat: out.Chat, parts: slices.Clone(rc.MessageIDs)}
			switch {
			case uncertain:
				e.unsure, e.reqID, e.started = true, prev.reqID, prev.started
			case maybeSent(err):
				e.unsure, e.reqID, e.started = true, fmt.Sprintf("unconfirmed-%s-%d", shortKey(key), i), started
			}
			if e.unsure || len(e.parts) > 0 {
				c.sent.record(key, e)
			}
			var ae *APIError
			if errors.As(err, &ae) && ae.Code == codeIPNotAllowed {
				c.log.Error("wecom_ip_not_trusted", "op", ae.Op,
					"hint", "add this server's public IP to the app's trusted IPs (企业可信IP) in the admin console")
			}
			return rc, err
		}
		rc.MessageIDs = append(rc.MessageIDs, id)
	}
	rc.Time = c.clk.Now()
	return rc, nil
}

// retryDedupe decides how a part whose earlier attempt (begun at
// started) got no answer is sent again: with message/send's duplicate
// check over the returned interval, or (ok false) not at all, where WeCom
// cannot drop a copy — appchat/send has no duplicate check, the check is
// off (Config.DuplicateCheck < 0), or the interval needed is longer than
// Config.DuplicateCheck.
//
// The interval is the shortest that covers the retry: the time since the
// earlier attempt began plus three CallTimeouts (the retry may take a
// token refresh and a second call to reach WeCom), in whole seconds.
// WeCom compares content, so the check is never set on a first attempt:
// it would also drop a different message that happens to say the same
// thing (two turns both answering "好的").
func (c *Channel) retryDedupe(chat channel.Chat, started time.Time) (time.Duration, bool) {
	if chat.Kind == channel.Group || c.cfg.DuplicateCheck < 0 {
		return 0, false
	}
	d := max(c.clk.Now().Sub(started), 0) + 3*c.cfg.CallTimeout
	d = (d + time.Second - 1).Truncate(time.Second)
	if d > c.cfg.DuplicateCheck {
		return 0, false
	}
	return d, true
}

// sendAppPart sends one part of a message (a message/send or appchat/send
// body without its recipient) and returns its message id. dedupe > 0
// sets message/send's duplicate check with that interval.
func (c *Channel) sendAppPart(ctx context.Context, chat channel.Chat, b map[string]any, dedupe time.Duration) (string, error) {
	media := b["msgtype"] != "text"
	b["safe"] = 0
	if chat.Kind == channel.Group {
		b["chatid"] = chat.ID
		var ans struct {
			MsgID string `json:"msgid"`
		}
		if err := c.appCall(ctx, "appchat/send", "/cgi-bin/appchat/send", b, &ans, media); err != nil {
			return "", err
		}
		if ans.MsgID == "" {
			return "wecom-" + randomID(8), nil // appchat/send answers without a msgid
		}
		return ans.MsgID, nil
	}
	b["touser"] = chat.ID
	b["agentid"] = c.cfg.AgentID
	if dedupe > 0 {
		b["enable_duplicate_check"] = 1
		b["duplicate_check_interval"] = int64(dedupe / time.Second)
	}
	var ans appSendAnswer
	err := c.appCall(ctx, "message/send", "/cgi-bin/message/send", b, &ans, media)
	if err == nil {
		err = recipientRefused(chat.ID, ans)
	}
	if err != nil {
		return "", err
	}
	return ans.MsgID, nil
}

// recipientRefused turns a message/send answer that names the recipient
// in invaliduser or unlicenseduser into an error.
func recipientRefused(user string, ans appSendAnswer) error {
	in := func(list string) bool {
		return slices.ContainsFunc(strings.Split(list, "|"), func(s string) bool { return strings.EqualFold(s, user) })
	}
	switch {
	case in(ans.InvalidUser):
		return fmt.Errorf("wecom: message/send: %w (%w)",
			&channel.RejectedError{Code: "invaliduser", Reason: "the user is not in the app's visible range"}, channel.ErrKicked)
	case in(ans.UnlicensedUser):
		return fmt.Errorf("wecom: message/send: %w",
			&channel.RejectedError{Code: "unlicenseduser", Reason: "the user has no license for the app"})
	}
	return nil
}

// shortKey is a short stable form of an idempotency key.
func shortKey(key string) string {
	if len(key) > 16 {
		return key[:16]
	}
	if key == "" {
		return randomID(8)
	}
	return key
}
