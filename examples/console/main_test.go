package main

import (
	"bytes"
	"image"
	pngenc "image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/internal/pgtest"
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

// TestImageCommand: "/image PATH caption" sends the picture with its
// caption, and the (offline, vision-declared) model gets it as an image
// part of the current message.
func TestImageCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	var png bytes.Buffer
	require.NoError(t, pngenc.Encode(&png, img))
	path := filepath.Join(dir, "cat.png")
	require.NoError(t, os.WriteFile(path, png.Bytes(), 0o600))

	env := map[string]string{"PERSONA_DATA": filepath.Join(dir, "data")}
	var out bytes.Buffer
	in := "/image " + path + " is this nice?\n/image " + filepath.Join(dir, "missing.png") + "\n/why\n/quit\n"
	require.NoError(t, run(t.Context(), strings.NewReader(in), &out, func(k string) string { return env[k] }))
	s := out.String()
	require.Contains(t, s, `You said "[image] is this nice?"; my context holds 0 earlier message(s) of ours, and 1 picture(s) came with it`)
	require.Contains(t, s, "! /image: stat")
	require.Contains(t, s, "why: outcome=replied")
}

// TestPostgresSession runs the console with its state in PostgreSQL
// (PERSONA_DATABASE_URL), twice on the same schema: the second run's
// context holds the first run's message, as it would with SQLite.
func TestPostgresSession(t *testing.T) {
	url := pgtest.Schema(t)
	for i, want := range []string{"holds 0 earlier", "holds 1 earlier"} {
		env := map[string]string{"PERSONA_DATA": t.TempDir(), "PERSONA_DATABASE_URL": url}
		var out bytes.Buffer
		require.NoError(t, run(t.Context(), strings.NewReader("hi\n/quit\n"), &out, func(k string) string { return env[k] }), "run %d", i)
		require.Contains(t, out.String(), want, "run %d", i)
	}
}
