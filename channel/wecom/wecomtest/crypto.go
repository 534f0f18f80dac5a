package wecomtest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // WeCom's signature scheme
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// cipherKit is the fake's side of WeCom's callback crypto (written apart
// from the adapter's, so that a mistake in one is caught by the other):
// AES-256-CBC with IV = key[:16], PKCS#7 padding to 32 bytes, plaintext
// random(16) ‖ big-endian length ‖ msg ‖ receiver id, SHA-1 signature
// over the sorted token, timestamp, nonce and ciphertext.
type cipherKit struct {
	token string
	key   []byte
}

func newCipherKit(token, encodingAESKey string) (*cipherKit, error) {
	key, err := base64.StdEncoding.DecodeString(encodingAESKey + "=")
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("wecomtest: EncodingAESKey %q is not 43 base64 characters of a 32-byte key", encodingAESKey)
	}
	return &cipherKit{token: token, key: key}, nil
}

// Sign returns msg_signature for the parts.
func Sign(token, timestamp, nonce, encrypted string) string {
	parts := []string{token, timestamp, nonce, encrypted}
	sort.Strings(parts)
	h := sha1.New() //nolint:gosec // WeCom's signature scheme
	for _, p := range parts {
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (k *cipherKit) sign(timestamp, nonce, encrypted string) string {
	return Sign(k.token, timestamp, nonce, encrypted)
}

// seal encrypts msg for receiver.
func (k *cipherKit) seal(msg []byte, receiver string) string {
	plain := make([]byte, 0, 20+len(msg)+len(receiver)+32)
	prefix := make([]byte, 16)
	_, _ = rand.Read(prefix)
	plain = append(plain, prefix...)
	plain = binary.BigEndian.AppendUint32(plain, uint32(len(msg))) //nolint:gosec // test payloads are small
	plain = append(plain, msg...)
	plain = append(plain, receiver...)
	return base64.StdEncoding.EncodeToString(aesCBC(k.key, pad32(plain), true))
}

// open decrypts a ciphertext and checks the receiver.
func (k *cipherKit) open(encrypted, receiver string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(encrypted)
	if err != nil || len(raw) == 0 || len(raw)%aes.BlockSize != 0 {
		return nil, errors.New("wecomtest: ciphertext is not base64 of whole AES blocks")
	}
	plain, err := unpad32(aesCBC(k.key, raw, false))
	if err != nil {
		return nil, err
	}
	if len(plain) < 20 {
		return nil, errors.New("wecomtest: plaintext shorter than its header")
	}
	n := int(binary.BigEndian.Uint32(plain[16:20]))
	if n < 0 || n > len(plain)-20 {
		return nil, errors.New("wecomtest: plaintext length out of range")
	}
	if got := string(plain[20+n:]); got != receiver {
		return nil, fmt.Errorf("wecomtest: receiver id %q, want %q", got, receiver)
	}
	return plain[20 : 20+n], nil
}

func aesCBC(key, data []byte, encrypt bool) []byte {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // the key was checked to be 32 bytes
	}
	out := make([]byte, len(data))
	if encrypt {
		cipher.NewCBCEncrypter(block, key[:16]).CryptBlocks(out, data)
	} else {
		cipher.NewCBCDecrypter(block, key[:16]).CryptBlocks(out, data)
	}
	return out
}

func pad32(b []byte) []byte {
	p := 32 - len(b)%32
	return append(b, []byte(strings.Repeat(string(rune(p)), p))...)
}

func unpad32(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, errors.New("wecomtest: empty plaintext")
	}
	p := int(b[len(b)-1])
	if p < 1 || p > 32 || p > len(b) {
		return nil, errors.New("wecomtest: bad padding")
	}
	for _, x := range b[len(b)-p:] {
		if int(x) != p {
			return nil, errors.New("wecomtest: bad padding")
		}
	}
	return b[:len(b)-p], nil
}

// EncryptMedia encrypts a media file the way an AI bot's links serve it:
// AES-256-CBC with the base64 key (43 or 44 characters), IV = key[:16],
// PKCS#7 padding to 32 bytes.
func EncryptMedia(data []byte, key string) ([]byte, error) {
	k, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(key, "="))
	if err != nil || len(k) != 32 {
		return nil, errors.New("wecomtest: media key is not base64 of 32 bytes")
	}
	return aesCBC(k, pad32(append([]byte(nil), data...)), true), nil
}
