package wecom_test

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/wecom"
)

// The official test vectors of WeCom's callback crypto: the sample of the
// official Go library (sbzhu/weworkapi_golang, sample.go, commit 7e1b55d1;
// the C#, PHP and Python samples carry the same).
const (
	vecToken    = "QDG6eK"
	vecAESKey   = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	vecCorpID   = "wx5823bf96d3bd56c7"
	vecURLSig   = "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3"
	vecURLTS    = "1409659589"
	vecURLNonce = "263014780"
	vecEchoStr  = "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
	vecMsgSig   = "477715d11cdb4164915debcba66cb864d751f3e6"
	vecMsgTS    = "1409659813"
	vecMsgNonce = "1372623149"
	vecEncrypt  = "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdCUpj911L3vg3W/sYYvuJTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4Xgpue06DOdnLxAUHzM6+kDZ+HMZfJYuR+LtwGc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+KqCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAVGUcallcrw8V2t9EL4EhzJWrQUax5wLVMNS0+rUPA3k22Ncx4XXZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H3KDYA5Pl/T8Z1ptDAVe0lXdQ2YoyyH2uyPIGHBZZIs2pDBS8R07+qN+E7Q=="
	vecMsgXML   = "<xml><ToUserName><![CDATA[wx5823bf96d3bd56c7]]></ToUserName>\n" +
		"<FromUserName><![CDATA[mycreate]]></FromUserName>\n" +
		"<CreateTime>1409659813</CreateTime>\n" +
		"<MsgType><![CDATA[text]]></MsgType>\n" +
		"<Content><![CDATA[hello]]></Content>\n" +
		"<MsgId>4561255354251345929</MsgId>\n" +
		"<AgentID>218</AgentID>\n" +
		"</xml>"
)

func vecCrypter(t *testing.T, receiver string) *wecom.Crypter {
	t.Helper()
	c, err := wecom.NewCrypter(vecToken, vecAESKey, receiver)
	require.NoError(t, err)
	return c
}

func TestCrypterOfficialVectors(t *testing.T) {
	t.Parallel()
	c := vecCrypter(t, vecCorpID)

	// VerifyURL: the signature matches and echostr decrypts to the
	// message "1616140317555161061".
	require.Equal(t, vecURLSig, c.Signature(vecURLTS, vecURLNonce, vecEchoStr))
	plain, err := c.VerifyURL(vecURLSig, vecURLTS, vecURLNonce, vecEchoStr)
	require.NoError(t, err)
	require.Equal(t, "1616140317555161061", string(plain))

	// DecryptMsg: the signature matches and the ciphertext decrypts to
	// the text message XML, 0x11c bytes.
	require.Equal(t, vecMsgSig, c.Signature(vecMsgTS, vecMsgNonce, vecEncrypt))
	require.NoError(t, c.Verify(vecMsgSig, vecMsgTS, vecMsgNonce, vecEncrypt))
	require.NoError(t, c.Verify(strings.ToUpper(vecMsgSig), vecMsgTS, vecMsgNonce, vecEncrypt), "hex case does not matter")
	plain, err = c.Decrypt(vecEncrypt)
	require.NoError(t, err)
	require.Equal(t, vecMsgXML, string(plain))
	require.Len(t, plain, 0x11c)

	// The same ciphertext for an AI bot (receiver "") is refused.
	_, err = vecCrypter(t, "").Decrypt(vecEncrypt)
	require.ErrorIs(t, err, wecom.ErrReceiver)
}

// rawKey is the AES key of the vector EncodingAESKey.
func rawKey(t *testing.T) []byte {
	t.Helper()
	k, err := base64.StdEncoding.DecodeString(vecAESKey + "=")
	require.NoError(t, err)
	return k
}

// encryptRaw encrypts plain (already padded, or deliberately not) with the
// vector key, as an attacker who knows the layout but not the key cannot.
func encryptRaw(t *testing.T, plain []byte) string {
	t.Helper()
	k := rawKey(t)
	block, err := aes.NewCipher(k)
	require.NoError(t, err)
	out := make([]byte, len(plain))
	cipher.NewCBCEncrypter(block, k[:16]).CryptBlocks(out, plain)
	return base64.StdEncoding.EncodeToString(out)
}

// layout builds random(16) ‖ len ‖ msg ‖ receiver, padded to 32 with pad
// (0: a correct pad).
func layout(msg, receiver string, declared int, pad byte) []byte {
	b := bytes.Repeat([]byte{'r'}, 16)
	b = binary.BigEndian.AppendUint32(b, uint32(declared))
	b = append(b, msg...)
	b = append(b, receiver...)
	p := 32 - len(b)%32
	v := byte(p)
	if pad != 0 {
		v = pad
	}
	return append(b, bytes.Repeat([]byte{v}, p)...)
}

func TestCrypterRoundTrip(t *testing.T) {
	t.Parallel()
	for _, receiver := range []string{vecCorpID, ""} {
		c := vecCrypter(t, receiver)
		for _, msg := range []string{"", "x", strings.Repeat("长", 1000), `{"msgtype":"stream"}`, strings.Repeat("a", 11), strings.Repeat("b", 12)} {
			enc, sig, err := c.Seal([]byte(msg), "1700000000", "42")
			require.NoError(t, err)
			require.NoError(t, c.Verify(sig, "1700000000", "42", enc))
			got, err := c.Decrypt(enc)
			require.NoError(t, err)
			require.Equal(t, msg, string(got))
			raw, _ := base64.StdEncoding.DecodeString(enc)
			require.Zero(t, len(raw)%32, "padded to 32-byte blocks")
		}
		a, err := c.Encrypt([]byte("same"))
		require.NoError(t, err)
		b, err := c.Encrypt([]byte("same"))
		require.NoError(t, err)
		require.NotEqual(t, a, b, "a fresh random prefix every time")
	}
}

func TestCrypterRefusesTamperedInput(t *testing.T) {
	t.Parallel()
	c := vecCrypter(t, vecCorpID)
	good := encryptRaw(t, layout("hello", vecCorpID, 5, 0))
	msg, err := c.Decrypt(good)
	require.NoError(t, err)
	require.Equal(t, "hello", string(msg))

	// A signature that is off by one character, of the wrong length, or
	// over other parts.
	sig := c.Signature(vecMsgTS, vecMsgNonce, good)
	flipped := []byte(sig)
	flipped[3] ^= 1
	for _, bad := range []string{string(flipped), sig[:39], sig + "0", "", c.Signature(vecMsgTS, "1", good)} {
		require.ErrorIs(t, c.Verify(bad, vecMsgTS, vecMsgNonce, good), wecom.ErrSignature, "%q", bad)
	}
	require.ErrorIs(t, c.Verify(sig, vecMsgTS, vecMsgNonce, good+"x"), wecom.ErrSignature)

	cases := []struct {
		name string
		enc  string
		want error
	}{
		{"wrong receiver id", encryptRaw(t, layout("hello", "wx0000000000000000", 5, 0)), wecom.ErrReceiver},
		{"empty receiver id", encryptRaw(t, layout("hello", "", 5, 0)), wecom.ErrReceiver},
		{"bad padding value", encryptRaw(t, layout("hello", vecCorpID, 5, 33)), wecom.ErrPadding},
		{"zero padding", encryptRaw(t, layout("hello", vecCorpID, 5, 0xff)), wecom.ErrPadding},
		{"length beyond the text", encryptRaw(t, layout("hello", vecCorpID, 1<<20, 0)), wecom.ErrLayout},
		{"truncated by a block", good[:len(good)-24] + "", wecom.ErrCiphertext},
		{"truncated to half a block", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 8)), wecom.ErrCiphertext},
		{"not base64", "%%%%", wecom.ErrCiphertext},
		{"empty", "", wecom.ErrCiphertext},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Decrypt(tc.enc)
			require.Error(t, err)
			if tc.want == wecom.ErrCiphertext {
				// Truncation is caught as a malformed ciphertext or, when
				// whole blocks remain, by the padding or layout checks.
				require.Truef(t, errorIsAny(err, wecom.ErrCiphertext, wecom.ErrPadding, wecom.ErrLayout, wecom.ErrReceiver), "%v", err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}

	// A ciphertext with whole blocks dropped from the end decrypts to
	// garbage padding (or layout) and is refused.
	raw, _ := base64.StdEncoding.DecodeString(vecEncrypt)
	short := base64.StdEncoding.EncodeToString(raw[:len(raw)-32])
	_, err = c.Decrypt(short)
	require.Error(t, err)
}

func errorIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

func TestNewCrypterRefusesBadKeys(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"", "short", vecAESKey + "A", vecAESKey[:42] + "%"} {
		_, err := wecom.NewCrypter(vecToken, k, "")
		require.ErrorIs(t, err, wecom.ErrBadKey, "%q", k)
		require.NotContains(t, err.Error(), vecAESKey[:20], "the key never appears in the error")
	}
}

func TestMediaCrypto(t *testing.T) {
	t.Parallel()
	data := []byte("\x89PNG\r\n\x1a\n fake picture bytes")
	for _, key := range []string{vecAESKey, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))} {
		enc, err := wecom.EncryptMedia(data, key)
		require.NoError(t, err)
		require.Zero(t, len(enc)%32)
		got, err := wecom.DecryptMedia(enc, key)
		require.NoError(t, err)
		require.Equal(t, data, got)
		_, err = wecom.DecryptMedia(enc[:len(enc)-5], key)
		require.ErrorIs(t, err, wecom.ErrCiphertext)
	}
	_, err := wecom.DecryptMedia([]byte("0123456789abcdef"), "not a key")
	require.ErrorIs(t, err, wecom.ErrBadKey)
}
