package onebot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// errInvalidID is wrapped by the error of an event or API answer whose id
// is outside the protocol's range or of the wrong JSON type. Such a payload
// can never become valid: events are logged (invalid_event) and dropped,
// API answers fail the call.
var errInvalidID = errors.New("onebot: invalid id")

// wireID is an id field kept as its JSON text (nil when absent or null), so
// that the range checks below can name the field that failed. OneBot v11
// gives every id as a JSON number: message_id is an int32 (negative on
// NapCat), user_id, group_id, self_id, target_id and operator_id are QQ
// numbers (positive int64).
type wireID []byte

// UnmarshalJSON keeps the raw JSON text of the id.
func (v *wireID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*v = nil
		return nil
	}
	*v = bytes.Clone(b)
	return nil
}

// present reports whether the field was given (and not null).
func (v wireID) present() bool { return len(v) > 0 }

// wireInt parses the JSON text of an integer: a number without a fraction
// or an exponent that fits in an int64. why says what is wrong otherwise.
func wireInt(b []byte) (n int64, why string) {
	switch {
	case len(b) == 0:
		return 0, "empty"
	case b[0] == '"':
		return 0, "a string, not a number"
	case b[0] == '{' || b[0] == '[':
		return 0, "an object or array, not a number"
	case b[0] == 't' || b[0] == 'f':
		return 0, "a boolean, not a number"
	case bytes.ContainsAny(b, ".eE"):
		return 0, "not an integer (a fraction or an exponent)"
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, "out of the 64-bit range"
	case err != nil:
		return 0, "not a number"
	}
	return n, ""
}

// idError builds the error of an invalid id field.
func idError(field string, raw []byte, why string) error {
	shown := string(raw)
	if len(shown) > 40 {
		shown = shown[:40] + "…"
	}
	return fmt.Errorf("%w: %s %s: %s", errInvalidID, field, shown, why)
}

// qq returns a QQ number (user, group, self, target or operator id) as
// decimal text, "" when the field is absent or null. zeroIsNone lets 0 mean
// "none" (a private message's group_id, a whole-group mute's user_id);
// otherwise 0 is invalid, like any value that is not a positive integer.
func (v wireID) qq(field string, zeroIsNone bool) (string, error) {
	if !v.present() {
		return "", nil
	}
	n, why := wireInt(v)
	switch {
	case why != "":
		return "", idError(field, v, why)
	case n == 0 && zeroIsNone:
		return "", nil
	case n <= 0:
		return "", idError(field, v, "not a positive QQ number")
	}
	return strconv.FormatInt(n, 10), nil
}

// msg returns a message id as decimal text, "" when the field is absent or
// null; anything but a nonzero 32-bit integer is invalid.
func (v wireID) msg(field string) (string, error) {
	if !v.present() {
		return "", nil
	}
	n, why := wireInt(v)
	switch {
	case why != "":
		return "", idError(field, v, why)
	case n == 0:
		return "", idError(field, v, "0 is not a message id")
	case n < math.MinInt32 || n > math.MaxInt32:
		return "", idError(field, v, "outside the 32-bit range of message ids")
	}
	return strconv.FormatInt(n, 10), nil
}

// seq returns a message_seq, 0 when the field is absent, null or 0;
// anything but a non-negative integer is invalid.
func (v wireID) seq(field string) (int64, error) {
	if !v.present() {
		return 0, nil
	}
	n, why := wireInt(v)
	switch {
	case why != "":
		return 0, idError(field, v, why)
	case n < 0:
		return 0, idError(field, v, "a negative sequence number")
	}
	return n, nil
}

// idText is the canonical decimal text of a message id or QQ number given
// as text (a segment's data, a header, a caller's argument), or ok=false.
// A QQ number must be positive; a message id nonzero and 32-bit.
func idText(s string, message bool) (string, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s {
		return "", false
	}
	if message {
		return s, n != 0 && n >= math.MinInt32 && n <= math.MaxInt32
	}
	return s, n > 0
}

// ids reads the id fields of a payload and keeps the first error, so a
// decoder can read them all and check once.
type ids struct{ err error }

func (r *ids) qq(v wireID, field string, zeroIsNone bool) string {
	s, err := v.qq(field, zeroIsNone)
	if r.err == nil {
		r.err = err
	}
	return s
}

func (r *ids) msg(v wireID, field string) string {
	s, err := v.msg(field)
	if r.err == nil {
		r.err = err
	}
	return s
}

func (r *ids) seq(v wireID, field string) int64 {
	n, err := v.seq(field)
	if r.err == nil {
		r.err = err
	}
	return n
}

// wireText is a string field kept as its JSON text (nil when absent or
// null), so that a request's flag or comment of the wrong JSON type is
// refused with the field's name instead of failing the whole payload.
type wireText []byte

// UnmarshalJSON keeps the raw JSON text of the field.
func (v *wireText) UnmarshalJSON(b []byte) error { return (*wireID)(v).UnmarshalJSON(b) }

// str returns the field's string, "" when it is absent or null; any other
// JSON type is invalid.
func (v wireText) str(field string) (string, error) {
	if len(v) == 0 {
		return "", nil
	}
	var s string
	if v[0] != '"' || json.Unmarshal(v, &s) != nil {
		shown := string(v)
		if len(shown) > 40 {
			shown = shown[:40] + "…"
		}
		return "", fmt.Errorf("%w: %s %s: not a string", errInvalidRequest, field, shown)
	}
	return s, nil
}

// optInt is an integer read leniently (a number or a numeric string) that
// remembers whether it was present.
type optInt struct {
	V  int64
	OK bool
}

func (o *optInt) UnmarshalJSON(b []byte) error {
	*o = optInt{}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	s := string(b)
	if b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return nil
		}
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*o = optInt{V: n, OK: true}
		return nil
	}
	if x, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(x) && math.Abs(x) < 1<<62 {
		*o = optInt{V: int64(x), OK: true}
	}
	return nil
}

// lenientString reads a string, or the JSON text of any other value.
type lenientString string

func (l *lenientString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*l = lenientString(s)
		return nil
	}
	if string(b) == "null" {
		*l = ""
		return nil
	}
	*l = lenientString(b)
	return nil
}

// wireEvent is the union of the OneBot v11 event fields the adapter reads.
// Message history items and get_msg data have the same shape.
type wireEvent struct {
	Time          optInt          `json:"time"`
	SelfID        wireID          `json:"self_id"`
	PostType      string          `json:"post_type"`
	MessageType   string          `json:"message_type"`
	SubType       string          `json:"sub_type"`
	MessageID     wireID          `json:"message_id"`
	MessageSeq    wireID          `json:"message_seq"`
	UserID        wireID          `json:"user_id"`
	GroupID       wireID          `json:"group_id"`
	TargetID      wireID          `json:"target_id"`
	OperatorID    wireID          `json:"operator_id"`
	Message       json.RawMessage `json:"message"`
	RawMessage    lenientString   `json:"raw_message"`
	Sender        wireSender      `json:"sender"`
	Anonymous     *wireAnonymous  `json:"anonymous"`
	NoticeType    string          `json:"notice_type"`
	RequestType   string          `json:"request_type"`
	Flag          wireText        `json:"flag"`
	Comment       wireText        `json:"comment"`
	MetaEventType string          `json:"meta_event_type"`
	Status        *wireStatus     `json:"status"`
	Interval      optInt          `json:"interval"`
	Duration      optInt          `json:"duration"`
}

type wireSender struct {
	UserID   wireID        `json:"user_id"`
	Nickname lenientString `json:"nickname"`
	Card     lenientString `json:"card"`
	Role     lenientString `json:"role"`
	Level    optInt        `json:"level"`
}

type wireAnonymous struct {
	Name lenientString `json:"name"`
}

// wireStatus is the status of a heartbeat or of get_status. Online may be
// null (unknown).
type wireStatus struct {
	Online *bool `json:"online"`
	Good   *bool `json:"good"`
}

// effective reports the "effectively online" verdict of a status: online
// is not false and good is not false.
func (s *wireStatus) effective() bool {
	if s == nil {
		return true
	}
	return (s.Online == nil || *s.Online) && (s.Good == nil || *s.Good)
}

// frameHead is what the WebSocket reader decodes first to tell an event
// from an API response.
type frameHead struct {
	PostType *string         `json:"post_type"`
	Echo     json.RawMessage `json:"echo"`
	Status   json.RawMessage `json:"status"`
}

// response is the API response envelope {status, retcode, data, echo}.
type response struct {
	Status  string          `json:"status"`
	Retcode optInt          `json:"retcode"`
	Data    json.RawMessage `json:"data"`
	Msg     lenientString   `json:"msg"`
	Wording lenientString   `json:"wording"`
	Message lenientString   `json:"message"`
	Echo    json.RawMessage `json:"echo"`
}

// request is an API request frame {action, params, echo}.
type request struct {
	Action string `json:"action"`
	Params any    `json:"params,omitempty"`
	Echo   string `json:"echo,omitempty"`
}
