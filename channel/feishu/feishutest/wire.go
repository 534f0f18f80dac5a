package feishutest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// The fake's own implementations of the platform's wire formats: the
// callback encryption and signature, and the long connection's protobuf
// frames. They are written independently of package feishu, so that a
// mistake in one is not mirrored by the other.

// Encrypt encrypts a callback body the way Feishu does for an app with an
// Encrypt Key: base64 of a random IV followed by the AES-256-CBC
// ciphertext of the PKCS#7-padded plaintext, under SHA-256 of the key.
func Encrypt(encryptKey string, plaintext []byte) string {
	var iv [aes.BlockSize]byte
	_, _ = rand.Read(iv[:])
	return EncryptWithIV(encryptKey, iv[:], plaintext)
}

// EncryptWithIV is Encrypt with a given 16-byte IV (deterministic, for
// test vectors).
func EncryptWithIV(encryptKey string, iv, plaintext []byte) string {
	key := sha256.Sum256([]byte(encryptKey))
	block, err := aes.NewCipher(key[:])
	if err != nil || len(iv) != aes.BlockSize {
		panic("feishutest: bad key or IV")
	}
	pad := aes.BlockSize - len(plaintext)%aes.BlockSize
	buf := make([]byte, 0, len(plaintext)+pad)
	buf = append(buf, plaintext...)
	for range pad {
		buf = append(buf, byte(pad))
	}
	out := make([]byte, aes.BlockSize+len(buf))
	copy(out, iv)
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(out[aes.BlockSize:], buf)
	return base64.StdEncoding.EncodeToString(out)
}

// Sign computes the X-Lark-Signature of a callback request: lowercase
// hex of SHA-256 over timestamp, nonce, Encrypt Key and body.
func Sign(timestamp, nonce, encryptKey string, body []byte) string {
	sum := sha256.Sum256([]byte(timestamp + nonce + encryptKey + string(body)))
	return hex.EncodeToString(sum[:])
}

// FrameHeader is one header of a long-connection frame.
type FrameHeader struct {
	Key, Value string // the header's name and value
}

// Frame is a long-connection frame (pbbp2.Frame).
type Frame struct {
	SeqID, LogID    uint64        // fields 1 and 2
	Service, Method int32         // fields 3 (service_id) and 4 (0 control, 1 data)
	Headers         []FrameHeader // field 5: type, message_id, sum, seq, …
	PayloadEncoding string        // field 6
	PayloadType     string        // field 7
	Payload         []byte        // field 8: the event, answer or ClientConfig JSON
	LogIDNew        string        // field 9
}

// Header returns the first header named key, or "".
func (f Frame) Header(key string) string {
	for _, h := range f.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

// EncodeFrame encodes a frame the way the official SDKs' generated code
// does: every scalar and string field written (empty strings included),
// the payload when non-nil.
func EncodeFrame(f Frame) []byte {
	var b []byte
	key := func(field, wire int) { b = putUvarint(b, uint64(field<<3|wire)) }
	str := func(field int, s []byte) {
		key(field, 2)
		b = putUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	key(1, 0)
	b = putUvarint(b, f.SeqID)
	key(2, 0)
	b = putUvarint(b, f.LogID)
	key(3, 0)
	b = putUvarint(b, uint64(int64(f.Service)))
	key(4, 0)
	b = putUvarint(b, uint64(int64(f.Method)))
	for _, h := range f.Headers {
		var hb []byte
		hb = putUvarint(hb, 1<<3|2)
		hb = putUvarint(hb, uint64(len(h.Key)))
		hb = append(hb, h.Key...)
		hb = putUvarint(hb, 2<<3|2)
		hb = putUvarint(hb, uint64(len(h.Value)))
		hb = append(hb, h.Value...)
		str(5, hb)
	}
	str(6, []byte(f.PayloadEncoding))
	str(7, []byte(f.PayloadType))
	if f.Payload != nil {
		str(8, f.Payload)
	}
	str(9, []byte(f.LogIDNew))
	return b
}

func putUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v&0x7f|0x80))
		v >>= 7
	}
	return append(b, byte(v))
}

var errFrame = errors.New("feishutest: malformed frame")

// DecodeFrame decodes a frame; it is strict about the wire format and
// the required fields.
func DecodeFrame(data []byte) (Frame, error) {
	var f Frame
	have := map[int]bool{}
	for len(data) > 0 {
		tag, n := uvarint(data)
		if n <= 0 {
			return Frame{}, errFrame
		}
		data = data[n:]
		field, wire := int(tag>>3), int(tag&7)
		switch wire {
		case 0:
			v, n := uvarint(data)
			if n <= 0 {
				return Frame{}, errFrame
			}
			data = data[n:]
			switch field {
			case 1:
				f.SeqID = v
			case 2:
				f.LogID = v
			case 3:
				f.Service = int32(v)
			case 4:
				f.Method = int32(v)
			}
		case 2:
			l, n := uvarint(data)
			if n <= 0 || l > uint64(len(data)-n) {
				return Frame{}, errFrame
			}
			v := data[n : n+int(l)]
			data = data[n+int(l):]
			switch field {
			case 5:
				h, err := decodeHeader(v)
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
			return Frame{}, fmt.Errorf("%w: wire type %d", errFrame, wire)
		}
		have[field] = true
	}
	if !have[1] || !have[2] || !have[3] || !have[4] {
		return Frame{}, fmt.Errorf("%w: required field missing", errFrame)
	}
	return f, nil
}

func decodeHeader(data []byte) (FrameHeader, error) {
	var h FrameHeader
	for len(data) > 0 {
		tag, n := uvarint(data)
		if n <= 0 || tag&7 != 2 {
			return h, errFrame
		}
		data = data[n:]
		l, n := uvarint(data)
		if n <= 0 || l > uint64(len(data)-n) {
			return h, errFrame
		}
		v := string(data[n : n+int(l)])
		data = data[n+int(l):]
		switch tag >> 3 {
		case 1:
			h.Key = v
		case 2:
			h.Value = v
		}
	}
	return h, nil
}

// uvarint reads a varint; n <= 0 when it is truncated or too long.
func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}
