package feishu_test

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
)

// TestDecryptOfficialVector: the decryption example of Feishu's event
// subscription guide ("request-url-configuration-case"; also used by the
// nonebot Feishu adapter's AESCipher test): Encrypt Key "test key", the
// encrypt field below, plaintext "hello world" (PKCS#7 padding 5×0x05).
func TestDecryptOfficialVector(t *testing.T) {
	t.Parallel()
	got, err := feishu.Decrypt("P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=", "test key")
	require.NoError(t, err)
	require.Equal(t, "hello world", string(got))
}

// TestSignatureVector: Feishu publishes no signature vector; this one was
// derived from the documented formula sha256(timestamp + nonce + encrypt
// key + body) and checked with sha256sum (the third signature vector).
func TestSignatureVector(t *testing.T) {
	t.Parallel()
	body := []byte(`{"schema":"2.0","header":{"event_type":"im.message.receive_v1"}}`)
	const want = "0699d2932f5c3efca3fa1c88a0c883779c7345aaf9c289841a7d4fb18a8e0763"
	require.Equal(t, want, feishu.Signature("1700000000", "nonce123", "test key", body))
	require.Equal(t, want, feishutest.Sign("1700000000", "nonce123", "test key", body), "the fake signs the same way")
}

func TestDecryptRoundTrip(t *testing.T) {
	t.Parallel()
	for _, plain := range []string{"", "{}", "hello world", "0123456789abcdef", `{"text":"你好 👋🏽"}`, string(bytes.Repeat([]byte("x"), 4099))} {
		enc := feishutest.Encrypt("round trip key", []byte(plain))
		got, err := feishu.Decrypt(enc, "round trip key")
		require.NoError(t, err, "%q", plain)
		require.Equal(t, plain, string(got))
	}
	// The fake's deterministic form reproduces the official vector's
	// shape: IV first, then the blocks.
	iv := bytes.Repeat([]byte{7}, 16)
	enc := feishutest.EncryptWithIV("k", iv, []byte("hello world"))
	raw, err := base64.StdEncoding.DecodeString(enc)
	require.NoError(t, err)
	require.Len(t, raw, 32)
	require.Equal(t, iv, raw[:16])
}

// encryptRaw encrypts already padded blocks (to build bad paddings).
func encryptRaw(t *testing.T, key string, padded []byte) string {
	t.Helper()
	k := sha256.Sum256([]byte(key))
	block, err := aes.NewCipher(k[:])
	require.NoError(t, err)
	iv := bytes.Repeat([]byte{1}, 16)
	out := make([]byte, 16+len(padded))
	copy(out, iv)
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(out[16:], padded)
	return base64.StdEncoding.EncodeToString(out)
}

func TestDecryptRejectsTamperedInput(t *testing.T) {
	t.Parallel()
	const key = "tamper key"
	good := feishutest.Encrypt(key, []byte(`{"schema":"2.0"}`))
	raw, _ := base64.StdEncoding.DecodeString(good)
	block16 := bytes.Repeat([]byte("a"), 16)
	tests := map[string]string{
		"not base64":              "!!!not base64!!!",
		"empty":                   "",
		"IV only":                 base64.StdEncoding.EncodeToString(raw[:16]),
		"truncated ciphertext":    base64.StdEncoding.EncodeToString(raw[:len(raw)-5]),
		"truncated by a block":    base64.StdEncoding.EncodeToString(raw[:16+len(raw)-32]) + "",
		"wrong key":               feishutest.Encrypt("another key", bytes.Repeat([]byte("z"), 40)),
		"pad byte zero":           encryptRaw(t, key, append(bytes.Repeat([]byte("a"), 15), 0)),
		"pad byte over 32":        encryptRaw(t, key, append(append([]byte{}, block16...), append(bytes.Repeat([]byte("b"), 15), 33)...)),
		"inconsistent pad":        encryptRaw(t, key, append(bytes.Repeat([]byte("a"), 12), 1, 2, 3, 4)),
		"pad longer than message": encryptRaw(t, key, bytes.Repeat([]byte{20}, 16)),
	}
	for name, enc := range tests {
		got, err := feishu.Decrypt(enc, key)
		if name == "truncated by a block" && err == nil {
			// One block fewer may still unpad by chance; it must then not
			// be the original plaintext.
			require.NotEqual(t, `{"schema":"2.0"}`, string(got), name)
			continue
		}
		require.ErrorIs(t, err, feishu.ErrDecrypt, name)
		require.Nil(t, got, name)
		require.NotContains(t, err.Error(), key, "%s: the key never appears in errors", name)
	}
	// A 32-byte pad (senders that pad to 32-byte blocks) is accepted.
	got, err := feishu.Decrypt(encryptRaw(t, key, bytes.Repeat([]byte{32}, 32)), key)
	require.NoError(t, err)
	require.Empty(t, got)
}
