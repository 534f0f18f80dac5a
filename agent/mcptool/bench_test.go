package mcptool_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/mcptool"
)

// benchCall measures one tool call through the registry, end to end.
func benchCall(b *testing.B, srv mcptool.Server, name string) {
	src, err := mcptool.Open(b.Context(), []mcptool.Server{srv}, mcptool.Options{Logger: quietLogger()})
	require.NoError(b, err)
	b.Cleanup(func() { _ = src.Close() })
	reg := agent.NewRegistry()
	require.NoError(b, src.Register(reg))
	tool, ok := reg.Lookup(name)
	require.True(b, ok)
	args := json.RawMessage(`{"text":"hello"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tool.Call(b.Context(), args); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCallHTTP(b *testing.B) {
	hs := startHTTP(b, "", newTestServer(nil, false))
	benchCall(b, mcptool.Server{Name: "calc", URL: hs.url()}, "calc_echo")
}

func BenchmarkCallStdio(b *testing.B) {
	exe, err := os.Executable()
	require.NoError(b, err)
	benchCall(b, mcptool.Server{Name: "kid", Command: exe, Env: []string{serverEnv + "=ok", "GORACE=atexit_sleep_ms=0"}}, "kid_echo")
}
