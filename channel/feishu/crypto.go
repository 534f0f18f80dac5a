package feishu

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrDecrypt is wrapped by every error Decrypt returns: the "encrypt"
// field is not base64, is too short, is not a whole number of AES blocks
// or has bad padding (a wrong encrypt key usually shows as bad padding).
var ErrDecrypt = errors.New("feishu: cannot decrypt the event")

// maxPad is the largest PKCS#7 pad length Decrypt accepts. Feishu pads
// to the 16-byte AES block (the official vector ends in five 0x05);
// senders that pad to 32-byte blocks are accepted too.
const maxPad = 32

// Decrypt opens the "encrypt" field of an encrypted event body, as
// Feishu's event-subscription guide describes it: the field is standard
// base64 of IV (16 bytes) followed by AES-256-CBC ciphertext, the key is
// SHA-256 of the app's Encrypt Key, and the plaintext has PKCS#7 padding.
// It returns the plaintext (the event JSON) or an error wrapping
// ErrDecrypt; it never panics, whatever the input.
func Decrypt(encrypted, encryptKey string) ([]byte, error) {
	buf, err := base64.StdEncoding.DecodeString(encrypted)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64", ErrDecrypt)
	}
	if len(buf) < 2*aes.BlockSize || len(buf)%aes.BlockSize != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not an IV and whole AES blocks", ErrDecrypt, len(buf))
	}
	key := sha256.Sum256([]byte(encryptKey))
	block, err := aes.NewCipher(key[:])
	if err != nil { // unreachable: the key is 32 bytes
		return nil, fmt.Errorf("%w: %w", ErrDecrypt, err)
	}
	plain := make([]byte, len(buf)-aes.BlockSize)
	cipher.NewCBCDecrypter(block, buf[:aes.BlockSize]).CryptBlocks(plain, buf[aes.BlockSize:])
	n := int(plain[len(plain)-1])
	if n == 0 || n > maxPad || n > len(plain) {
		return nil, fmt.Errorf("%w: bad padding", ErrDecrypt)
	}
	bad := 0
	for _, b := range plain[len(plain)-n:] {
		bad |= int(b) ^ n
	}
	if bad != 0 {
		return nil, fmt.Errorf("%w: bad padding", ErrDecrypt)
	}
	return plain[:len(plain)-n], nil
}

// Signature is the X-Lark-Signature Feishu puts on the event requests of
// an app with an Encrypt Key: the lowercase hex SHA-256 of timestamp,
// nonce, the Encrypt Key and the raw body, concatenated.
func Signature(timestamp, nonce, encryptKey string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(timestamp))
	h.Write([]byte(nonce))
	h.Write([]byte(encryptKey))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// signatureOK compares a received signature with the expected one in
// constant time.
func signatureOK(got, want string) bool {
	return len(got) == len(want) && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
