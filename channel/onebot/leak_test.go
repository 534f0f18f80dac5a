package onebot_test

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
	"github.com/personakit/persona/clock"
)

// TestNoGoroutineLeak (not parallel, so it runs alone): after Run ends and
// the fake is closed, every goroutine started for connections, calls
// (answered, timed out, cut off), watchdogs and retries is gone.
func TestNoGoroutineLeak(t *testing.T) {
	settle := func() int {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		return runtime.NumGoroutine()
	}
	base := settle()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			r := tr.build(t, onebottest.Config{}, onebot.Config{Clock: clk})
			s := r.run(t)
			ctx := tctx(t)
			for range 5 {
				_, err := r.ch.Send(ctx, channel.Outgoing{Chat: testGroup, Text: "x"})
				require.NoError(t, err)
			}
			r.fake.Stall("get_msg", true)
			errc := make(chan error, 1)
			go func() { _, err := r.ch.GetMessage(ctx, "1"); errc <- err }()
			_, err := r.fake.WaitCall(ctx, "get_msg")
			require.NoError(t, err)
			clk.Advance(10 * time.Second)
			require.ErrorIs(t, <-errc, onebot.ErrTimeout)
			require.NoError(t, r.fake.Heartbeat(ctx)) // arms a watchdog
			emitAndWait(t, r, s, "one more")
			if tr.name != "HTTP" {
				r.fake.Stall("get_forward_msg", true)
				go func() { _, err := r.ch.Call(ctx, "get_forward_msg", map[string]any{"id": "x"}); errc <- err }()
				_, err := r.fake.WaitCall(ctx, "get_forward_msg")
				require.NoError(t, err)
				r.fake.Drop()
				require.ErrorIs(t, <-errc, onebot.ErrConnectionLost)
			}
		})
	}
	var now int
	for range 500 {
		if now = settle(); now <= base {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var ours []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "channel/onebot") {
			ours = append(ours, g)
		}
	}
	require.LessOrEqual(t, now, base, "goroutines left: %d > %d\n%s", now, base, strings.Join(ours, "\n\n"))
}
