package onebot

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// flexID is an id read leniently: a JSON number or a string, kept as its
// decimal text ("" when absent or null).
type flexID string

func (f *flexID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		*f = ""
		return nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexID(s)
		return nil
	}
	s := string(b)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*f = flexID(strconv.FormatInt(n, 10))
		return nil
	}
	if x, err := strconv.ParseFloat(s, 64); err == nil && x == math.Trunc(x) && math.Abs(x) < 1<<62 {
		*f = flexID(strconv.FormatInt(int64(x), 10))
		return nil
	}
	if b[0] == '{' || b[0] == '[' || b[0] == 't' || b[0] == 'f' {
		*f = "" // not an id: ignore rather than fail the whole payload
		return nil
	}
	*f = flexID(s)
	return nil
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
	SelfID        flexID          `json:"self_id"`
	PostType      string          `json:"post_type"`
	MessageType   string          `json:"message_type"`
	SubType       string          `json:"sub_type"`
	MessageID     flexID          `json:"message_id"`
	RealID        flexID          `json:"real_id"`
	MessageSeq    optInt          `json:"message_seq"`
	UserID        flexID          `json:"user_id"`
	GroupID       flexID          `json:"group_id"`
	TargetID      flexID          `json:"target_id"`
	OperatorID    flexID          `json:"operator_id"`
	Message       json.RawMessage `json:"message"`
	RawMessage    lenientString   `json:"raw_message"`
	Sender        wireSender      `json:"sender"`
	Anonymous     *wireAnonymous  `json:"anonymous"`
	NoticeType    string          `json:"notice_type"`
	RequestType   string          `json:"request_type"`
	MetaEventType string          `json:"meta_event_type"`
	Status        *wireStatus     `json:"status"`
	Interval      optInt          `json:"interval"`
	Duration      optInt          `json:"duration"`
}

type wireSender struct {
	UserID   flexID        `json:"user_id"`
	Nickname lenientString `json:"nickname"`
	Card     lenientString `json:"card"`
	Role     lenientString `json:"role"`
	Level    optInt        `json:"level"`
}

type wireAnonymous struct {
	ID   flexID        `json:"id"`
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
