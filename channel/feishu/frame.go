package feishu

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The long connection speaks binary protobuf frames (proto2 message
// pbbp2.Frame of Feishu's SDKs); the codec below is written by hand for
// this one fixed message and its Header:
//
//	message Header { required string key = 1; required string value = 2; }
//	message Frame {
//	  required uint64 SeqID = 1;  required uint64 LogID = 2;
//	  required int32 service = 3; required int32 method = 4;
//	  repeated Header headers = 5;
//	  optional string payload_encoding = 6; optional string payload_type = 7;
//	  optional bytes payload = 8;           optional string LogIDNew = 9;
//	}

// Frame methods.
const (
	// FrameControl is a control frame (ping, pong).
	FrameControl int32 = 0
	// FrameData is a data frame (an event, a card callback).
	FrameData int32 = 1
)

// Frame header keys and the values of the "type" header.
const (
	HeaderType      = "type"
	HeaderMessageID = "message_id"
	HeaderSum       = "sum"
	HeaderSeq       = "seq"
	HeaderTraceID   = "trace_id"
	HeaderBizRT     = "biz_rt"

	TypeEvent = "event"
	TypeCard  = "card"
	TypePing  = "ping"
	TypePong  = "pong"
)

// FrameHeader is one key/value header of a Frame.
type FrameHeader struct {
	Key, Value string // the header's name (HeaderType, …) and value
}

// Frame is one long-connection frame.
type Frame struct {
	SeqID   uint64 // the frame's sequence id (field 1)
	LogID   uint64 // the server's log id (field 2)
	Service int32  // the service_id of the connection URL (field 3)
	Method  int32  // FrameControl or FrameData (field 4)
	// Headers carry the type (event, card, ping, pong), the message_id,
	// the fragment count (sum) and index (seq), trace_id and biz_rt.
	Headers         []FrameHeader
	PayloadEncoding string // unused by the platform so far (field 6)
	PayloadType     string // unused by the platform so far (field 7)
	// Payload is the event JSON of a data frame, the answer JSON of an
	// acknowledgement, or a ClientConfig in a pong.
	Payload  []byte
	LogIDNew string // the server's string log id (field 9)
}

// Header returns the value of the first header named key, or "".
func (f *Frame) Header(key string) string {
	for _, h := range f.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

// headerInt returns the header as a non-negative int, or def when it is
// absent or malformed.
func (f *Frame) headerInt(key string, def int) int {
	v := f.Header(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// ErrFrame is wrapped by every error UnmarshalFrame returns.
var ErrFrame = errors.New("feishu: malformed frame")

// Protobuf wire types used by the frame.
const (
	wireVarint = 0
	wireI64    = 1
	wireBytes  = 2
	wireI32    = 5
)

// MarshalFrame encodes f. Fields are written in field-number order; the
// required scalars always, the optional strings and payload when set.
func MarshalFrame(f Frame) []byte {
	b := make([]byte, 0, 32+len(f.Payload))
	b = appendVarintField(b, 1, f.SeqID)
	b = appendVarintField(b, 2, f.LogID)
	b = appendVarintField(b, 3, uint64(int64(f.Service))) // int32: negative values are sign-extended
	b = appendVarintField(b, 4, uint64(int64(f.Method)))
	for _, h := range f.Headers {
		var hb []byte
		hb = appendBytesField(hb, 1, []byte(h.Key))
		hb = appendBytesField(hb, 2, []byte(h.Value))
		b = appendBytesField(b, 5, hb)
	}
	if f.PayloadEncoding != "" {
		b = appendBytesField(b, 6, []byte(f.PayloadEncoding))
	}
	if f.PayloadType != "" {
		b = appendBytesField(b, 7, []byte(f.PayloadType))
	}
	if f.Payload != nil {
		b = appendBytesField(b, 8, f.Payload)
	}
	if f.LogIDNew != "" {
		b = appendBytesField(b, 9, []byte(f.LogIDNew))
	}
	return b
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendVarintField(b []byte, field int, v uint64) []byte {
	b = appendVarint(b, uint64(field)<<3|wireVarint)
	return appendVarint(b, v)
}

func appendBytesField(b []byte, field int, v []byte) []byte {
	b = appendVarint(b, uint64(field)<<3|wireBytes)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

// UnmarshalFrame decodes a frame. It checks the wire format strictly
// (truncated varints and lengths, wrong wire types for known fields,
// missing required fields, header keys and values that are not UTF-8),
// skips unknown fields as protobuf does, and never panics.
func UnmarshalFrame(data []byte) (Frame, error) {
	var f Frame
	var seen uint8 // bits of the required fields 1–4
	d := decoder{b: data}
	for !d.done() {
		field, wt, err := d.tag()
		if err != nil {
			return Frame{}, err
		}
		switch {
		case field >= 1 && field <= 4:
			if wt != wireVarint {
				return Frame{}, fmt.Errorf("%w: field %d has wire type %d, want varint", ErrFrame, field, wt)
			}
			v, err := d.varint()
			if err != nil {
				return Frame{}, err
			}
			switch field {
			case 1:
				f.SeqID = v
			case 2:
				f.LogID = v
			case 3:
				f.Service = int32(v) // protobuf int32: the low 32 bits
			case 4:
				f.Method = int32(v)
			}
			seen |= 1 << (field - 1)
		case field >= 5 && field <= 9:
			if wt != wireBytes {
				return Frame{}, fmt.Errorf("%w: field %d has wire type %d, want length-delimited", ErrFrame, field, wt)
			}
			v, err := d.bytes()
			if err != nil {
				return Frame{}, err
			}
			switch field {
			case 5:
				h, err := unmarshalHeader(v)
				if err != nil {
					return Frame{}, err
				}
				f.Headers = append(f.Headers, h)
			case 6:
				f.PayloadEncoding = string(v)
			case 7:
				f.PayloadType = string(v)
			case 8:
				f.Payload = append([]byte{}, v...)
			case 9:
				f.LogIDNew = string(v)
			}
		default:
			if err := d.skip(wt); err != nil {
				return Frame{}, err
			}
		}
	}
	if seen != 0b1111 {
		return Frame{}, fmt.Errorf("%w: a required field (SeqID, LogID, service, method) is missing", ErrFrame)
	}
	return f, nil
}

func unmarshalHeader(data []byte) (FrameHeader, error) {
	var h FrameHeader
	var seen uint8
	d := decoder{b: data}
	for !d.done() {
		field, wt, err := d.tag()
		if err != nil {
			return FrameHeader{}, err
		}
		if field != 1 && field != 2 {
			if err := d.skip(wt); err != nil {
				return FrameHeader{}, err
			}
			continue
		}
		if wt != wireBytes {
			return FrameHeader{}, fmt.Errorf("%w: header field %d has wire type %d", ErrFrame, field, wt)
		}
		v, err := d.bytes()
		if err != nil {
			return FrameHeader{}, err
		}
		if !utf8.Valid(v) {
			return FrameHeader{}, fmt.Errorf("%w: header field %d is not UTF-8", ErrFrame, field)
		}
		if field == 1 {
			h.Key = string(v)
		} else {
			h.Value = string(v)
		}
		seen |= 1 << (field - 1)
	}
	if seen != 0b11 {
		return FrameHeader{}, fmt.Errorf("%w: a header without key or value", ErrFrame)
	}
	return h, nil
}

// decoder reads protobuf wire data.
type decoder struct {
	b []byte
	i int
}

func (d *decoder) done() bool { return d.i >= len(d.b) }

func (d *decoder) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if d.i >= len(d.b) {
			return 0, fmt.Errorf("%w: truncated varint", ErrFrame)
		}
		c := d.b[d.i]
		d.i++
		if shift == 63 && c > 1 {
			return 0, fmt.Errorf("%w: varint overflows 64 bits", ErrFrame)
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: varint longer than 10 bytes", ErrFrame)
}

func (d *decoder) tag() (field int, wt int, err error) {
	v, err := d.varint()
	if err != nil {
		return 0, 0, err
	}
	field, wt = int(v>>3), int(v&7)
	if v>>3 == 0 || v>>3 > 1<<29-1 {
		return 0, 0, fmt.Errorf("%w: field number %d", ErrFrame, v>>3)
	}
	return field, wt, nil
}

func (d *decoder) bytes() ([]byte, error) {
	n, err := d.varint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(d.b)-d.i) {
		return nil, fmt.Errorf("%w: length %d past the end of the frame", ErrFrame, n)
	}
	v := d.b[d.i : d.i+int(n)]
	d.i += int(n)
	return v, nil
}

func (d *decoder) skip(wt int) error {
	switch wt {
	case wireVarint:
		_, err := d.varint()
		return err
	case wireI64, wireI32:
		n := 8
		if wt == wireI32 {
			n = 4
		}
		if len(d.b)-d.i < n {
			return fmt.Errorf("%w: truncated fixed-width field", ErrFrame)
		}
		d.i += n
		return nil
	case wireBytes:
		_, err := d.bytes()
		return err
	}
	return fmt.Errorf("%w: unsupported wire type %d", ErrFrame, wt)
}
