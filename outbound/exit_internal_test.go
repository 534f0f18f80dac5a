package outbound

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maskPieces build texts near every pattern: its literals, separators,
// token characters, case variants and the non-ASCII letters that fold to
// ASCII ones under (?i) (U+212A KELVIN SIGN to k, U+017F LONG S to s).
var maskPieces = []string{
	"sk-", "ghp_", "gho_", "github_pat_", "xoxb-", "AKIA", "AIza", "eyJ", ".", "-----BEGIN ", "RSA PRIVATE KEY-----",
	"-----END RSA PRIVATE KEY-----", "Bearer ", "BASIC ", "bAsIc\t", "api_key", "API-KEY", "apikey", "access_token",
	"Refresh-Token", "secret", "SECRET", "password", "passwd", "token", "session_id", "SessionId", "cookie",
	"Set-Cookie", "=", ":", " = ", ": ", "\"quoted value\"", "'single'", ";", ", ", "\n", "1234567890", "12345678",
	"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ", "ABCDEFGHIJKLMNOP", "abc_DEF-123", "ſecret", "baſic ",
	"\u212aey", "toKen", "hunter2hunter2", "[redacted]", "plain words ", "日本語 ",
}

// randomText joins 1 to 12 random pieces.
func randomText(r *rand.Rand, pieces []string) string {
	var b strings.Builder
	for range 1 + r.IntN(12) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

// The pre-checks never change what MaskSecrets does: with and without
// them every text is masked the same.
func TestMaskSecretsPreChecks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	secrets := []string{"hunter2hunter2", "", "ab"}
	masked := 0
	for range 20000 {
		text := randomText(r, maskPieces)
		want := maskSecrets(text, secrets, false)
		require.Equal(t, want, maskSecrets(text, secrets, true), "text %q", text)
		if want != text {
			masked++
		}
	}
	require.Greater(t, masked, 5000, "the texts exercise the patterns")
	// Folded letters inside a keyword (at its start the ASCII \b fails).
	for _, text := range []string{"baſic abcdefghijklmnopqrstu", "to\u212aen=abc", "seſsion_id: 1", "api_\u212aey=zzz"} {
		require.Equal(t, maskSecrets(text, nil, false), maskSecrets(text, nil, true), "text %q", text)
		require.NotEqual(t, text, MaskSecrets(text, nil), "%q folds to a secret pattern", text)
	}
}

func FuzzMaskSecrets(f *testing.F) {
	for _, p := range maskPieces {
		f.Add(p + "=" + p)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if want := maskSecrets(text, nil, false); want != maskSecrets(text, nil, true) {
			t.Fatalf("pre-checks changed %q", text)
		}
	})
}
