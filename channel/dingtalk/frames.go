package dingtalk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The frame types of the Stream protocol.
const (
	FrameSystem   = "SYSTEM"
	FrameEvent    = "EVENT"
	FrameCallback = "CALLBACK"
)

// The SYSTEM topics.
const (
	TopicPing       = "ping"
	TopicDisconnect = "disconnect"
)

// The acknowledgement codes of the Stream protocol: 200 the frame was
// processed, 404 the client has no handler for its topic, 500 it failed
// (for an EVENT, with data status LATER, the server delivers it again).
const (
	AckOK       = 200
	AckNotFound = 404
	AckFailed   = 500
)

// Frame is one server-to-client frame of a Stream connection. Data is the
// payload, which travels as a JSON-encoded string; DecodeFrame returns its
// text.
type Frame struct {
	// SpecVersion is the protocol version ("1.0"; absent on SYSTEM
	// frames).
	SpecVersion string
	// Type is FrameSystem, FrameEvent or FrameCallback.
	Type string
	// Headers always carry topic, messageId, contentType and time (unix
	// ms); numbers and booleans in the headers are kept as their JSON
	// text.
	Headers map[string]string
	// Data is the payload: a JSON document as text.
	Data string
}

// Topic returns the frame's topic header.
func (f *Frame) Topic() string { return f.Headers["topic"] }

// MessageID returns the frame's messageId header, which its
// acknowledgement must repeat.
func (f *Frame) MessageID() string { return f.Headers["messageId"] }

// wireFrame is a frame as it travels.
type wireFrame struct {
	SpecVersion string          `json:"specVersion"`
	Type        string          `json:"type"`
	Headers     json.RawMessage `json:"headers"`
	// Header is accepted too: one of the protocol document's examples
	// spells it so.
	Header json.RawMessage `json:"header"`
	Data   json.RawMessage `json:"data"`
}

// Errors of DecodeFrame.
var (
	// ErrMalformedFrame is wrapped by every DecodeFrame error.
	ErrMalformedFrame = errors.New("dingtalk: malformed stream frame")
)

// maxHeaderValue bounds one header value; maxHeaders the header count.
const (
	maxHeaderValue = 4096
	maxHeaders     = 64
)

// DecodeFrame parses one stream frame. It refuses frames that are not
// valid UTF-8 or not a JSON object, lack a type, or have headers that are
// not an object of scalars; data may be a JSON string (the protocol) or,
// leniently, an embedded JSON value, which is kept as its text.
func DecodeFrame(b []byte) (Frame, error) {
	bad := func(format string, a ...any) (Frame, error) {
		return Frame{}, fmt.Errorf("%w: %s", ErrMalformedFrame, fmt.Sprintf(format, a...))
	}
	if !utf8.Valid(b) {
		return bad("not valid UTF-8")
	}
	var w wireFrame
	if err := json.Unmarshal(b, &w); err != nil {
		return bad("%v", err)
	}
	if w.Type == "" {
		return bad("no type")
	}
	raw := w.Headers
	if isNull(raw) {
		raw = w.Header
	}
	headers, err := decodeHeaders(raw)
	if err != nil {
		return bad("headers: %v", err)
	}
	f := Frame{SpecVersion: w.SpecVersion, Type: w.Type, Headers: headers}
	switch {
	case isNull(w.Data):
	case w.Data[0] == '"':
		if err := json.Unmarshal(w.Data, &f.Data); err != nil {
			return bad("data: %v", err)
		}
	default:
		f.Data = string(w.Data)
	}
	return f, nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// decodeHeaders reads a headers object whose values are strings, numbers
// or booleans (kept as text); nulls are skipped.
func decodeHeaders(raw json.RawMessage) (map[string]string, error) {
	h := map[string]string{}
	if isNull(raw) {
		return h, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errors.New("not an object")
	}
	if len(m) > maxHeaders {
		return nil, fmt.Errorf("%d headers, at most %d", len(m), maxHeaders)
	}
	for k, v := range m {
		v = bytes.TrimSpace(v)
		var s string
		switch {
		case isNull(v):
			continue
		case v[0] == '"':
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, fmt.Errorf("%q: %w", k, err)
			}
		case v[0] == '{' || v[0] == '[':
			return nil, fmt.Errorf("%q is not a scalar", k)
		default:
			s = string(v)
		}
		if len(s) > maxHeaderValue {
			return nil, fmt.Errorf("%q is longer than %d bytes", k, maxHeaderValue)
		}
		h[k] = s
	}
	return h, nil
}

// Ack is the client's acknowledgement of one frame.
type Ack struct {
	// Code is AckOK, AckNotFound or AckFailed.
	Code int `json:"code"`
	// Headers carry the frame's messageId and the contentType.
	Headers map[string]string `json:"headers"`
	// Message is a short text ("OK").
	Message string `json:"message"`
	// Data is a JSON document as text (sent as a JSON string).
	Data string `json:"data"`
}

// newAck builds the acknowledgement of the frame with messageID.
func newAck(messageID string, code int, message, data string) Ack {
	return Ack{Code: code, Message: message, Data: data,
		Headers: map[string]string{"contentType": "application/json", "messageId": messageID}}
}

// The acknowledgement payloads.
const (
	// ackDataBot is the data of a bot message acknowledgement: the
	// server does not read it.
	ackDataBot = `{"response":null}`
	// ackDataLater tells the server the frame was not processed and
	// should be delivered again (the EVENT protocol's LATER status; for a
	// bot message the server does not read it, see the package doc).
	ackDataLater = `{"status":"LATER","message":"not stored; deliver again"}`
)

// EncodeAck renders an acknowledgement as it travels.
func EncodeAck(a Ack) []byte {
	if a.Headers == nil {
		a.Headers = map[string]string{}
	}
	b, _ := json.Marshal(a) // strings and a map of strings: cannot fail
	return b
}

// frameTime is the frame's time header (unix ms), 0 when absent or bad.
func frameTime(f *Frame) int64 {
	n, err := strconv.ParseInt(f.Headers["time"], 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
