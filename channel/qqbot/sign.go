package qqbot

import (
	"crypto/ed25519"
	"encoding/hex"
	"strings"
)

// Webhook signature headers (the docs' sign.md).
const (
	HeaderSignature = "X-Signature-Ed25519"
	HeaderTimestamp = "X-Signature-Timestamp"
	HeaderAppID     = "X-Bot-Appid"
)

// signingKey derives the webhook key pair from the bot secret as the docs
// describe: the secret repeated (doubling) until it is at least 32 bytes
// long, cut to 32 bytes, is the Ed25519 seed.
func signingKey(secret string) ed25519.PrivateKey {
	seed := secret
	for len(seed) < ed25519.SeedSize {
		seed = strings.Repeat(seed, 2)
	}
	return ed25519.NewKeyFromSeed([]byte(seed[:ed25519.SeedSize]))
}

// verifySignature checks a callback's X-Signature-Ed25519 (hex) over
// timestamp ‖ body. A signature that is not 64 bytes, or whose last byte
// has any of its top three bits set (not a canonical S), is refused
// before verifying.
func verifySignature(pub ed25519.PublicKey, sigHex, timestamp string, body []byte) bool {
	if timestamp == "" || len(sigHex) != 2*ed25519.SignatureSize {
		return false
	}
	sig, err := hex.DecodeString(sigHex)
	if err != nil || len(sig) != ed25519.SignatureSize || sig[63]&0xE0 != 0 {
		return false
	}
	msg := make([]byte, 0, len(timestamp)+len(body))
	msg = append(msg, timestamp...)
	msg = append(msg, body...)
	return ed25519.Verify(pub, msg, sig)
}

// validationSignature answers a callback-URL validation: hex of the
// signature over event_ts ‖ plain_token.
func validationSignature(key ed25519.PrivateKey, eventTS, plainToken string) string {
	return hex.EncodeToString(ed25519.Sign(key, []byte(eventTS+plainToken)))
}
