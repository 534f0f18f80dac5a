package telegram

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

// maxResponseBytes bounds a Bot API response body (a full getUpdates batch
// of 100 updates is far smaller).
const maxResponseBytes = 16 << 20

// ErrUnauthorized is matched (errors.Is) by errors of calls the Bot API
// refused with 401 Unauthorized or 404 Not Found, which is how it answers a
// wrong or revoked token. Run returns such an error instead of retrying;
// a Send that gets one also matches channel.ErrOffline.
var ErrUnauthorized = errors.New("telegram: unauthorized (check the bot token)")

// APIError is an unsuccessful Bot API answer ({"ok":false,...}, or a non-2xx
// status without a JSON body). It is classified for the pipeline (see
// channel.Classify) from the status code only, never from Description:
//
//   - 429: matches channel.ErrRateLimited; errors.As finds a
//     *channel.RateLimitedError carrying parameters.retry_after.
//   - 400: a definitive *channel.RejectedError (Code "400"); for a media
//     method it also matches channel.ErrMediaInvalid.
//   - 403: a definitive *channel.RejectedError (Code "403") that also
//     matches channel.ErrKicked (the bot was blocked, kicked or removed).
//   - 401, 404: ErrUnauthorized and channel.ErrOffline.
//   - anything else (409, 5xx, ...): unclassified, i.e. transient.
type APIError struct {
	// Method is the Bot API method that failed (never the URL, which
	// contains the token).
	Method string
	// Code is error_code from the body, or the HTTP status when the body
	// had none.
	Code int
	// Description is the Bot API's human-readable text (informational).
	Description string
	// RetryAfter is parameters.retry_after (429 answers).
	RetryAfter time.Duration
	// MigrateToChatID is parameters.migrate_to_chat_id: the group became a
	// supergroup with this id; resend there.
	MigrateToChatID int64

	classes []error
}

// Error describes the failure; it never contains the token.
func (e *APIError) Error() string {
	s := fmt.Sprintf("telegram: %s: error %d", e.Method, e.Code)
	if e.Description != "" {
		s += ": " + e.Description
	}
	if e.MigrateToChatID != 0 {
		s += " (migrated to chat " + strconv.FormatInt(e.MigrateToChatID, 10) + ")"
	}
	return s
}

// Unwrap returns the classified errors (see the type doc) so errors.Is and
// errors.As see through an APIError.
func (e *APIError) Unwrap() []error { return e.classes }

// newAPIError builds and classifies an APIError.
func newAPIError(method string, code int, desc string, retryAfter time.Duration, migrate int64) *APIError {
	e := &APIError{Method: method, Code: code, Description: desc, RetryAfter: retryAfter, MigrateToChatID: migrate}
	reason := desc
	if reason == "" {
		reason = http.StatusText(code)
	}
	if migrate != 0 {
		reason += " (migrated to chat " + strconv.FormatInt(migrate, 10) + ")"
	}
	switch code {
	case http.StatusTooManyRequests:
		if retryAfter <= 0 {
			retryAfter = time.Second
		}
		e.classes = []error{&channel.RateLimitedError{RetryAfter: retryAfter}}
	case http.StatusBadRequest:
		e.classes = []error{&channel.RejectedError{Code: "400", Reason: reason}}
		if isMediaMethod(method) {
			e.classes = append(e.classes, channel.ErrMediaInvalid)
		}
	case http.StatusForbidden:
		e.classes = []error{&channel.RejectedError{Code: "403", Reason: reason}, channel.ErrKicked}
	case http.StatusUnauthorized, http.StatusNotFound:
		e.classes = []error{ErrUnauthorized, channel.ErrOffline}
	}
	return e
}

func isMediaMethod(m string) bool {
	switch m {
	case "sendPhoto", "sendVoice", "sendAudio", "sendVideo", "sendDocument", "sendAnimation":
		return true
	}
	return false
}

// apiResponse is the Bot API response envelope.
type apiResponse struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  *struct {
		RetryAfter      int   `json:"retry_after"`
		MigrateToChatID int64 `json:"migrate_to_chat_id"`
	} `json:"parameters"`
}

// call invokes a Bot API method with JSON params and decodes the result
// into result (when non-nil). The call has its own deadline of timeout.
// Errors never contain the token: transport errors have the URL redacted.
func (c *Channel) call(ctx context.Context, method string, params any, timeout time.Duration, result any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("telegram: %s: encoding params: %w", method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.methodURL(method), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("telegram: %s: %w", method, c.redact(err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("telegram: %s: %w", method, c.redact(err))
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("telegram: %s: reading response: %w", method, c.redact(err))
	}
	if len(data) > maxResponseBytes {
		return fmt.Errorf("telegram: %s: response larger than %d bytes", method, maxResponseBytes)
	}
	var env apiResponse
	if err := json.Unmarshal(data, &env); err != nil {
		if resp.StatusCode/100 != 2 {
			return newAPIError(method, resp.StatusCode, "HTTP "+resp.Status+" without a Bot API body", 0, 0)
		}
		return fmt.Errorf("telegram: %s: malformed response (HTTP %d): %w", method, resp.StatusCode, err)
	}
	if !env.OK {
		code := env.ErrorCode
		if code == 0 {
			code = resp.StatusCode
		}
		if code/100 == 2 {
			code = http.StatusInternalServerError // "ok":false with a 2xx: treat as a server fault
		}
		var retry time.Duration
		var migrate int64
		if env.Parameters != nil {
			retry = time.Duration(env.Parameters.RetryAfter) * time.Second
			migrate = env.Parameters.MigrateToChatID
			if migrate != 0 && !validChatID(migrate) {
				migrate = 0 // out of range: not a chat to resend to
			}
		}
		return newAPIError(method, code, env.Description, retry, migrate)
	}
	if result != nil {
		if err := json.Unmarshal(env.Result, result); err != nil {
			return fmt.Errorf("telegram: %s: malformed result: %w", method, err)
		}
	}
	return nil
}

// methodURL is the request URL of a method. It contains the token and must
// never be logged or returned in an error.
func (c *Channel) methodURL(method string) string {
	return c.apiBase + "/bot" + c.token + "/" + method
}

// redact removes the token from an error: net/http puts the request URL
// in *url.Error, and a transport may repeat it in the error it wraps, in
// which case the error is replaced by one with the token cut out of its
// text that still matches (errors.Is) what the original matched.
func (c *Channel) redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		cp := *ue
		cp.URL = c.apiBase + "/bot<redacted>/..."
		err = &cp
	}
	if err != nil && c.token != "" && strings.Contains(err.Error(), c.token) {
		return &redactedError{msg: strings.ReplaceAll(err.Error(), c.token, "<redacted>"), err: err}
	}
	return err
}

// redactedError is an error whose text had the token in it. It has no
// Unwrap, so the original text cannot be reached; Is consults the
// original.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }

// Is reports whether the original error matches target.
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }

// Wire types: the subset of the Bot API types the adapter reads.

type tgUser struct {
	ID        int64  `json:"id"`
	IsBot     bool   `json:"is_bot"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name,omitempty"`
	Username  string `json:"username,omitempty"`
}

type tgChat struct {
	ID        int64  `json:"id"`
	Type      string `json:"type"`
	Title     string `json:"title,omitempty"`
	Username  string `json:"username,omitempty"`
	FirstName string `json:"first_name,omitempty"`
	LastName  string `json:"last_name,omitempty"`
}

type tgEntity struct {
	Type   string  `json:"type"`
	Offset int     `json:"offset"`
	Length int     `json:"length"`
	URL    string  `json:"url,omitempty"`
	User   *tgUser `json:"user,omitempty"`
}

type tgPhotoSize struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	FileSize     int64  `json:"file_size"`
}

// tgFile covers Voice, Audio, Document, Video, VideoNote, Animation and
// Sticker: the fields the adapter needs are common to all of them.
type tgFile struct {
	FileID     string `json:"file_id"`
	FileName   string `json:"file_name"`
	Title      string `json:"title"`
	MimeType   string `json:"mime_type"`
	FileSize   int64  `json:"file_size"`
	Duration   int    `json:"duration"`
	IsAnimated bool   `json:"is_animated"`
	IsVideo    bool   `json:"is_video"`
	Emoji      string `json:"emoji"`
}

// tgFileInfo is the File object getFile returns.
type tgFileInfo struct {
	FileID   string `json:"file_id"`
	FileSize int64  `json:"file_size"`
	FilePath string `json:"file_path"`
}

type tgMessage struct {
	MessageID         int64           `json:"message_id"`
	From              *tgUser         `json:"from"`
	SenderChat        *tgChat         `json:"sender_chat"`
	Date              int64           `json:"date"`
	Chat              *tgChat         `json:"chat"`
	ReplyToMessage    *tgMessage      `json:"reply_to_message"`
	IsTopicMessage    bool            `json:"is_topic_message"`
	ForumTopicCreated json.RawMessage `json:"forum_topic_created"`
	EditDate          int64           `json:"edit_date"`
	Text              string          `json:"text"`
	Entities          []tgEntity      `json:"entities"`
	Caption           string          `json:"caption"`
	CaptionEntities   []tgEntity      `json:"caption_entities"`
	Photo             []tgPhotoSize   `json:"photo"`
	Voice             *tgFile         `json:"voice"`
	Audio             *tgFile         `json:"audio"`
	Document          *tgFile         `json:"document"`
	Video             *tgFile         `json:"video"`
	VideoNote         *tgFile         `json:"video_note"`
	Animation         *tgFile         `json:"animation"`
	Sticker           *tgFile         `json:"sticker"`
	NewChatMembers    []tgUser        `json:"new_chat_members"`
	MediaGroupID      string          `json:"media_group_id"`
}

type tgUpdate struct {
	UpdateID      int64      `json:"update_id"`
	Message       *tgMessage `json:"message"`
	EditedMessage *tgMessage `json:"edited_message"`
}

type tgChatMember struct {
	Status string  `json:"status"`
	User   *tgUser `json:"user"`
}

type replyParameters struct {
	MessageID int64 `json:"message_id"`
}

// sendParams are the parameters of sendMessage and the send<Media> methods.
// Exactly one of Text or a media field is used per call.
type sendParams struct {
	ChatID          any              `json:"chat_id"`
	Text            string           `json:"text,omitempty"`
	Entities        []tgEntity       `json:"entities,omitempty"`
	Caption         string           `json:"caption,omitempty"`
	CaptionEntities []tgEntity       `json:"caption_entities,omitempty"`
	ReplyParameters *replyParameters `json:"reply_parameters,omitempty"`
	Photo           string           `json:"photo,omitempty"`
	Voice           string           `json:"voice,omitempty"`
	Audio           string           `json:"audio,omitempty"`
	Video           string           `json:"video,omitempty"`
	Document        string           `json:"document,omitempty"`
}
