package qqbot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Gateway and webhook opcodes (the docs' opcode.md).
const (
	opDispatch        = 0
	opHeartbeat       = 1
	opIdentify        = 2
	opResume          = 6
	opReconnect       = 7
	opInvalidSession  = 9
	opHello           = 10
	opHeartbeatAck    = 11
	opCallbackAck     = 12
	opCallbackVerify  = 13
	maxEventTypeBytes = 64
)

// Event types the adapter turns into events, and the two session events.
const (
	eventReady         = "READY"
	eventResumed       = "RESUMED"
	eventGroupAt       = "GROUP_AT_MESSAGE_CREATE"
	eventC2C           = "C2C_MESSAGE_CREATE"
	eventChannelAt     = "AT_MESSAGE_CREATE"
	eventDirectMessage = "DIRECT_MESSAGE_CREATE"
)

// payload is one gateway frame or webhook body:
// {"id","op","d","s","t"}.
type payload struct {
	// ID is the event id (dispatches).
	ID string
	Op int
	// D is the raw "d" (nil when absent or null).
	D json.RawMessage
	// S is the sequence number (dispatches; 0 when absent).
	S int64
	// T is the event type (dispatches).
	T string
}

// rawPayload is the JSON shape of a payload; op and s are read as raw
// values and checked to be integers.
type rawPayload struct {
	ID json.RawMessage `json:"id"`
	Op json.RawMessage `json:"op"`
	D  json.RawMessage `json:"d"`
	S  json.RawMessage `json:"s"`
	T  json.RawMessage `json:"t"`
}

// errMalformed is wrapped by decodePayload's errors.
var errMalformed = errors.New("malformed payload")

// decodePayload parses a frame or body. It fails for anything that is not
// a JSON object with an integer op; s must be a non-negative integer or
// absent/null, t and id strings or absent/null.
func decodePayload(data []byte) (payload, error) {
	var rp rawPayload
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&rp); err != nil {
		return payload{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if dec.More() {
		return payload{}, fmt.Errorf("%w: data after the JSON object", errMalformed)
	}
	var p payload
	op, ok := jsonInt(rp.Op)
	if !ok || op < 0 || op > 255 {
		return payload{}, fmt.Errorf("%w: op is missing or not a small integer", errMalformed)
	}
	p.Op = int(op)
	if !isNull(rp.S) {
		s, ok := jsonInt(rp.S)
		if !ok || s < 0 {
			return payload{}, fmt.Errorf("%w: s is not a non-negative integer", errMalformed)
		}
		p.S = s
	}
	var err error
	if p.T, err = jsonString(rp.T, "t"); err != nil {
		return payload{}, err
	}
	if len(p.T) > maxEventTypeBytes {
		return payload{}, fmt.Errorf("%w: t is %d bytes long", errMalformed, len(p.T))
	}
	if p.ID, err = jsonString(rp.ID, "id"); err != nil {
		return payload{}, err
	}
	if !isNull(rp.D) {
		p.D = rp.D
	}
	return p, nil
}

func isNull(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || string(s) == "null"
}

// jsonInt reads an integer JSON number (no fraction, no exponent).
func jsonInt(raw json.RawMessage) (int64, bool) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || strings.ContainsAny(s, ".eE") {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func jsonString(raw json.RawMessage, field string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: %s is not a string", errMalformed, field)
	}
	return s, nil
}

// flexInt is an integer field the platform sends as a number or as a
// numeric string (seq_in_channel); anything else reads as 0 instead of
// failing the whole message.
type flexInt int64

// UnmarshalJSON implements json.Unmarshaler.
func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if unq, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(unq)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		n = 0
	}
	*f = flexInt(n)
	return nil
}

// flexString is a string field that may arrive as a number (ids); other
// types read as "".
type flexString string

// UnmarshalJSON implements json.Unmarshaler.
func (f *flexString) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = flexString(s)
		return nil
	}
	t := strings.TrimSpace(string(b))
	if _, ok := jsonInt(json.RawMessage(t)); ok {
		*f = flexString(t)
		return nil
	}
	*f = ""
	return nil
}

// Wire types of the message events (the docs'
// send-receive/event.md and template/model.md).

type qqAuthor struct {
	ID           flexString `json:"id"`
	UserOpenID   flexString `json:"user_openid"`
	MemberOpenID flexString `json:"member_openid"`
	Username     string     `json:"username"`
	Bot          bool       `json:"bot"`
}

type qqMember struct {
	Nick  string       `json:"nick"`
	Roles []flexString `json:"roles"`
}

type qqAttachment struct {
	ContentType string  `json:"content_type"`
	Filename    string  `json:"filename"`
	Size        flexInt `json:"size"`
	URL         string  `json:"url"`
}

type qqReference struct {
	MessageID flexString `json:"message_id"`
}

type qqMessage struct {
	ID               flexString     `json:"id"`
	Author           *qqAuthor      `json:"author"`
	Content          string         `json:"content"`
	Timestamp        string         `json:"timestamp"`
	GroupOpenID      flexString     `json:"group_openid"`
	ChannelID        flexString     `json:"channel_id"`
	GuildID          flexString     `json:"guild_id"`
	Member           *qqMember      `json:"member"`
	Attachments      []qqAttachment `json:"attachments"`
	Seq              flexInt        `json:"seq"`
	SeqInChannel     flexInt        `json:"seq_in_channel"`
	MessageReference *qqReference   `json:"message_reference"`
}

// qqReady is the READY dispatch's d.
type qqReady struct {
	SessionID string `json:"session_id"`
	User      struct {
		ID       flexString `json:"id"`
		Username string     `json:"username"`
	} `json:"user"`
}

// qqHello is the Hello frame's d.
type qqHello struct {
	HeartbeatInterval int64 `json:"heartbeat_interval"`
}

// qqUser is the answer of GET /users/@me.
type qqUser struct {
	ID       flexString `json:"id"`
	Username string     `json:"username"`
}

// qqValidation is the d of a callback-URL validation (op 13).
type qqValidation struct {
	PlainToken string `json:"plain_token"`
	EventTS    string `json:"event_ts"`
}
