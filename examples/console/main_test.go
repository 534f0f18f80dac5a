package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPipedSession runs the console the way the README shows it:
// printf 'hi\n/why\n/quit\n' | go run ./examples/console
func TestPipedSession(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PERSONA_DATA": t.TempDir()}
	var out bytes.Buffer
	err := run(t.Context(), strings.NewReader("hi\nhow are you?\n/why\n/quit\n"), &out, func(k string) string { return env[k] })
	require.NoError(t, err)
	s := out.String()
	require.Contains(t, s, "offline demo model")
	require.Contains(t, s, `mira> (offline demo) You said "hi"; my context holds 0 earlier message(s) of ours`)
	// "hi" is context for the second message; the bot's reply to it is too,
	// unless both turns ran at once (two in flight per private chat).
	require.Regexp(t, `mira> \(offline demo\) You said "how are you\?"; my context holds [12] earlier message\(s\) of ours`, s)
	require.Contains(t, s, "why: outcome=replied attempts=1")
}

// TestEndOfInputWaitsForTheReply: without /quit, the reply still arrives
// before the program exits.
func TestEndOfInputWaitsForTheReply(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PERSONA_DATA": t.TempDir()}
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), strings.NewReader("hello\n"), &out, func(k string) string { return env[k] }))
	require.Contains(t, out.String(), `You said "hello"`)
}
