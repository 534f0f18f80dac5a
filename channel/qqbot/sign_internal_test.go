package qqbot

import (
	"crypto/ed25519"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// Key derivation: the docs' sign.md example (tencent-connect/bot-docs @
// 645787a4, docs/develop/api-v2/dev-prepare/interface-framework/sign.md):
// secret naOC0ocQE3shWLAfffVLB1rhYPG7 gives the seed
// naOC0ocQE3shWLAfffVLB1rhYPG7naOC and the public key below.
func TestSigningKeyDocVector(t *testing.T) {
	t.Parallel()
	key := signingKey("naOC0ocQE3shWLAfffVLB1rhYPG7")
	require.Equal(t, []byte("naOC0ocQE3shWLAfffVLB1rhYPG7naOC"), key.Seed())
	want := []byte{215, 195, 98, 254, 120, 174, 248, 31, 242, 50, 135, 180, 147, 98, 139, 93,
		176, 42, 60, 79, 227, 11, 33, 94, 77, 25, 96, 155, 93, 118, 103, 58}
	require.Equal(t, want, []byte(key.Public().(ed25519.PublicKey)))
	// A secret of 32 bytes or more is cut, a short one doubled.
	require.Equal(t, []byte("abcabcabcabcabcabcabcabcabcabcab"), signingKey("abc").Seed())
}

// Callback-URL validation: the docs' event-emit.md example (bot-docs @
// 645787a4, docs/develop/api-v2/dev-prepare/interface-framework/event-emit.md),
// appid 11111111, secret DG5g3B4j9X2KOErG.
func TestValidationSignatureDocVector(t *testing.T) {
	t.Parallel()
	got := validationSignature(signingKey("DG5g3B4j9X2KOErG"), "1725442341", "Arq0D5A61EgUu4OxUvOp")
	require.Equal(t, "87befc99c42c651b3aac0278e71ada338433ae26fcb24307bdc5ad38c1adc2d01bcfcadc0842edac85e85205028a1132afe09280305f13aa6909ffc2d652c706", got)
}

// Request verification: the official Go SDK's test vector
// (tencent-connect/botgo @ fe31c0df, interaction/signature/interaction_test.go).
func TestVerifySignatureSDKVector(t *testing.T) {
	t.Parallel()
	pub := signingKey("123456abcdef").Public().(ed25519.PublicKey)
	body := []byte(`{"id":"ROBOT1.0_veoihSEXDc8Q.g-6eLpNIa11bH8MisOjn-m-LKxCPntMk6exUXgcWCGpVO7L2QKTNZzjZzFFDSbiOFcqAPWyVA!!","content":"哦一下","timestamp":"2024-10-15T16:33:15+08:00","author":{"id":"675860273","user_openid":"675860273"}}`)
	sig := "e949b5b94ef4103df903fb031d1d16e358db3db83e79e117edd404c8508be3ce8a76d7bad1bed353194c126a1a5915b4ad8b5288c1191cc53a12acffccd82004"
	require.True(t, verifySignature(pub, sig, "1728981195", body))
	require.False(t, verifySignature(pub, sig, "1728981196", body), "another timestamp")
	require.False(t, verifySignature(pub, sig, "1728981195", append(body, ' ')), "another body")
	require.False(t, verifySignature(pub, sig, "", body), "no timestamp")
	require.False(t, verifySignature(pub, sig[:126], "1728981195", body), "short")
	require.False(t, verifySignature(pub, "zz"+sig[2:], "1728981195", body), "not hex")
	raw, _ := hex.DecodeString(sig)
	raw[63] |= 0xE0 // S not canonical: refused before verifying
	require.False(t, verifySignature(pub, hex.EncodeToString(raw), "1728981195", body))
}
