package wecom

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // the platform's signature scheme is SHA-1; it is not our choice
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Errors of the callback crypto. Every error Crypter returns wraps one of
// them, so a handler can answer by class without reading the text.
var (
	// ErrBadKey: the EncodingAESKey is not 43 base64 characters decoding
	// to 32 bytes.
	ErrBadKey = errors.New("wecom: invalid EncodingAESKey")
	// ErrSignature: msg_signature does not match the token, timestamp,
	// nonce and ciphertext.
	ErrSignature = errors.New("wecom: signature mismatch")
	// ErrCiphertext: the ciphertext is not base64, not a whole number of
	// AES blocks, or too short.
	ErrCiphertext = errors.New("wecom: malformed ciphertext")
	// ErrPadding: the decrypted text does not end in valid PKCS#7 padding
	// (block size 32).
	ErrPadding = errors.New("wecom: bad padding")
	// ErrLayout: the decrypted text is not random(16) ‖ length(4) ‖ msg ‖
	// receiver id.
	ErrLayout = errors.New("wecom: malformed plaintext")
	// ErrReceiver: the receiver id at the end of the plaintext is not the
	// one configured (the corp id for apps, "" for AI bots).
	ErrReceiver = errors.New("wecom: receiver id mismatch")
)

// padBlock is the PKCS#7 block size WeCom pads to (32, not AES's 16).
const padBlock = 32

// maxPlaintext bounds a decrypted message; callbacks are far smaller.
const maxPlaintext = 4 << 20

// Crypter implements WeCom's callback crypto (the scheme of the official
// WXBizMsgCrypt libraries, shared by app callbacks and AI-bot callbacks):
//
//   - the AES key is base64(EncodingAESKey + "=") (32 bytes) and the IV
//     its first 16 bytes;
//   - a message is encrypted as AES-256-CBC over random(16) ‖
//     big-endian uint32 length ‖ msg ‖ receiver id, PKCS#7-padded to a
//     multiple of 32 bytes, and sent base64 (standard alphabet);
//   - msg_signature is the lower-case hex SHA-1 of the token, timestamp,
//     nonce and ciphertext, sorted bytewise and concatenated.
//
// A Crypter is immutable and safe for concurrent use.
type Crypter struct {
	token    string
	block    cipher.Block
	iv       []byte
	receiver string
	random   io.Reader
}

// NewCrypter returns a Crypter for a callback's Token and EncodingAESKey
// (43 characters). receiverID is checked on every decrypted message: the
// corp id for app callbacks, "" for AI-bot callbacks.
func NewCrypter(token, encodingAESKey, receiverID string) (*Crypter, error) {
	key, err := decodeEncodingAESKey(encodingAESKey)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	return &Crypter{token: token, block: block, iv: key[:aes.BlockSize], receiver: receiverID, random: rand.Reader}, nil
}

// withRandom returns a copy of c that draws the 16 random prefix bytes of
// Encrypt from r (tests use a fixed reader).
func (c *Crypter) withRandom(r io.Reader) *Crypter {
	cp := *c
	cp.random = r
	return &cp
}

// decodeEncodingAESKey turns the 43-character EncodingAESKey into the
// 32-byte AES key. The error never contains the key.
func decodeEncodingAESKey(s string) ([]byte, error) {
	if len(s) != 43 {
		return nil, fmt.Errorf("%w: %d characters, want 43", ErrBadKey, len(s))
	}
	key, err := base64.StdEncoding.DecodeString(s + "=")
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("%w: not base64 of 32 bytes", ErrBadKey)
	}
	return key, nil
}

// Signature returns msg_signature for a timestamp, nonce and ciphertext.
func (c *Crypter) Signature(timestamp, nonce, encrypted string) string {
	return signature(c.token, timestamp, nonce, encrypted)
}

func signature(token, timestamp, nonce, encrypted string) string {
	parts := []string{token, timestamp, nonce, encrypted}
	sort.Strings(parts)
	sum := sha1.Sum([]byte(strings.Join(parts, ""))) //nolint:gosec // the platform's scheme
	return hex.EncodeToString(sum[:])
}

// Verify checks msg_signature in constant time; it returns an error
// wrapping ErrSignature when it does not match.
func (c *Crypter) Verify(msgSignature, timestamp, nonce, encrypted string) error {
	want := c.Signature(timestamp, nonce, encrypted)
	got := strings.ToLower(msgSignature)
	if len(got) != len(want) || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return ErrSignature
	}
	return nil
}

// Decrypt decrypts a base64 ciphertext and returns the message, after
// checking the padding, the layout and the receiver id.
func (c *Crypter) Decrypt(encrypted string) ([]byte, error) {
	if len(encrypted) > base64.StdEncoding.EncodedLen(maxPlaintext+padBlock) {
		return nil, fmt.Errorf("%w: %d characters", ErrCiphertext, len(encrypted))
	}
	raw, err := base64.StdEncoding.DecodeString(encrypted)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64", ErrCiphertext)
	}
	plain, err := cbcDecrypt(c.block, c.iv, raw)
	if err != nil {
		return nil, err
	}
	if len(plain) < 20 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the 20-byte header", ErrLayout, len(plain))
	}
	n := binary.BigEndian.Uint32(plain[16:20])
	if uint64(n) > uint64(len(plain)-20) {
		return nil, fmt.Errorf("%w: length %d beyond the %d bytes after the header", ErrLayout, n, len(plain)-20)
	}
	msg, receiver := plain[20:20+n], plain[20+n:]
	if string(receiver) != c.receiver {
		return nil, fmt.Errorf("%w: got %q", ErrReceiver, receiver)
	}
	return msg, nil
}

// VerifyURL checks and decrypts the echostr of a URL verification (GET)
// and returns the plaintext to answer with.
func (c *Crypter) VerifyURL(msgSignature, timestamp, nonce, echostr string) ([]byte, error) {
	if err := c.Verify(msgSignature, timestamp, nonce, echostr); err != nil {
		return nil, err
	}
	return c.Decrypt(echostr)
}

// Encrypt encrypts msg (with 16 fresh random bytes and the receiver id)
// and returns the base64 ciphertext.
func (c *Crypter) Encrypt(msg []byte) (string, error) {
	var buf bytes.Buffer
	prefix := make([]byte, 16)
	if _, err := io.ReadFull(c.random, prefix); err != nil {
		return "", fmt.Errorf("wecom: encrypt: random prefix: %w", err)
	}
	buf.Write(prefix)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(msg))) //nolint:gosec // callers bound msg far below 4 GiB
	buf.Write(n[:])
	buf.Write(msg)
	buf.WriteString(c.receiver)
	return base64.StdEncoding.EncodeToString(cbcEncrypt(c.block, c.iv, buf.Bytes())), nil
}

// Seal encrypts msg and signs the ciphertext with timestamp and nonce: the
// parts of a passive reply.
func (c *Crypter) Seal(msg []byte, timestamp, nonce string) (encrypted, msgSignature string, err error) {
	encrypted, err = c.Encrypt(msg)
	if err != nil {
		return "", "", err
	}
	return encrypted, c.Signature(timestamp, nonce, encrypted), nil
}

// DecryptMedia decrypts a media file an AI bot downloads (image or file
// URL of a message): AES-256-CBC with the 32-byte key, IV = key[:16] and
// PKCS#7 padding to 32 bytes, without the random prefix, length and
// receiver id of callback messages. key is the base64 aeskey of the
// message, or the bot's EncodingAESKey when the message has none.
func DecryptMedia(data []byte, key string) ([]byte, error) {
	k, err := decodeMediaKey(key)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	return cbcDecrypt(block, k[:aes.BlockSize], bytes.Clone(data))
}

// decodeMediaKey decodes a media aeskey: standard base64 with or without
// padding (an EncodingAESKey is 43 characters without its "=").
func decodeMediaKey(key string) ([]byte, error) {
	s := strings.TrimRight(key, "=")
	k, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		k, err = base64.RawURLEncoding.DecodeString(s)
	}
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("%w: media key is not base64 of 32 bytes", ErrBadKey)
	}
	return k, nil
}

// cbcDecrypt decrypts raw in place and removes the 32-byte PKCS#7 padding.
func cbcDecrypt(block cipher.Block, iv, raw []byte) ([]byte, error) {
	if len(raw) == 0 || len(raw)%aes.BlockSize != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a positive multiple of %d", ErrCiphertext, len(raw), aes.BlockSize)
	}
	cipher.NewCBCDecrypter(block, iv).CryptBlocks(raw, raw)
	return unpad(raw)
}

// unpad removes PKCS#7 padding of block size 32: the last byte p is in
// 1..32 and the last p bytes all equal p.
func unpad(b []byte) ([]byte, error) {
	p := int(b[len(b)-1])
	if p < 1 || p > padBlock || p > len(b) {
		return nil, fmt.Errorf("%w: pad byte %d", ErrPadding, p)
	}
	for _, x := range b[len(b)-p:] {
		if int(x) != p {
			return nil, fmt.Errorf("%w: inconsistent pad bytes", ErrPadding)
		}
	}
	return b[:len(b)-p], nil
}

// cbcEncrypt pads plain to a multiple of 32 and encrypts it.
func cbcEncrypt(block cipher.Block, iv, plain []byte) []byte {
	p := padBlock - len(plain)%padBlock
	buf := make([]byte, len(plain)+p)
	copy(buf, plain)
	for i := len(plain); i < len(buf); i++ {
		buf[i] = byte(p)
	}
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(buf, buf)
	return buf
}

// EncryptMedia encrypts data the way DecryptMedia expects (the fake
// platform and tests use it).
func EncryptMedia(data []byte, key string) ([]byte, error) {
	k, err := decodeMediaKey(key)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	return cbcEncrypt(block, k[:aes.BlockSize], data), nil
}
