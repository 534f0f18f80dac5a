package persona_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	persona "github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/eventcenter"
)

// TestEventCenterShowsTheBotLive drives the event center of a running
// pipeline in Chromium: a message sent through the fake channel appears
// on the open page within 2 s, with the trail the turn recorded, and the
// page refuses to show anything without the token.
func TestEventCenterShowsTheBotLive(t *testing.T) {
	t.Parallel()
	const bin = "/usr/bin/chromium"
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("this test needs Chromium at %s (Debian: apt-get install chromium): %v", bin, err)
	}
	const token = "operator-token-for-the-e2e-test"
	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat, agenttest.Reply("hello there"))
	h := newHarness(t, model, func(o *persona.Options) { o.Secrets = []string{"hunter2hunter2"} })
	center, err := h.p.EventCenter(eventcenter.Config{Token: token})
	require.NoError(t, err)
	t.Cleanup(center.Close)
	srv := httptest.NewServer(center)
	t.Cleanup(srv.Close)

	// The API refuses a missing or wrong token.
	for _, auth := range []string{"", "Bearer wrong-token-wrong-token"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/api/messages", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}

	l := launcher.New().Bin(bin).Headless(true).NoSandbox(true).Leakless(false).Set("disable-gpu").Set("disable-dev-shm-usage")
	u, err := l.Launch()
	require.NoError(t, err)
	t.Cleanup(func() { l.Kill(); l.Cleanup() })
	b := rod.New().ControlURL(u)
	require.NoError(t, b.Connect())
	t.Cleanup(func() { _ = b.Close() })
	p, err := b.Page(proto.TargetCreateTarget{})
	require.NoError(t, err)
	require.NoError(t, p.SetViewport(&proto.EmulationSetDeviceMetricsOverride{Width: 1280, Height: 800, DeviceScaleFactor: 1}))
	require.NoError(t, p.Navigate(srv.URL))
	require.NoError(t, p.WaitLoad())
	wait := func(d time.Duration, what, js string, args ...any) {
		t.Helper()
		require.NoError(t, p.Timeout(d).Wait(rod.Eval(js, args...)), "waiting for %s", what)
	}
	wait(10*time.Second, "the token prompt", `() => !document.getElementById('login').hidden`)
	input, err := p.Element("#token")
	require.NoError(t, err)
	require.NoError(t, input.Input(token))
	submit, err := p.Element("#login-submit")
	require.NoError(t, err)
	require.NoError(t, submit.Click(proto.InputMouseButtonLeft, 1))
	wait(10*time.Second, "the live feed", `() => document.getElementById('live').dataset.state === 'open'`)

	// A message through the fake channel shows up live.
	ev := h.say(group1, bob, "are you there? my password is hunter2hunter2", chantest.MentionBot())
	wait(2*time.Second, "the new message", `(id) => !!document.querySelector('#messages tr[data-id="' + CSS.escape(id) + '"]')`, ev.Key())
	o := h.outcome(ev)
	require.Equal(t, "replied", string(o.Code))
	body, err := p.Eval(`() => document.body.textContent`)
	require.NoError(t, err)
	require.NotContains(t, body.Value.Str(), "hunter2hunter2", "secrets are masked on the page")

	row, err := p.Element(`#messages tr[data-id="` + ev.Key() + `"]`)
	require.NoError(t, err)
	require.NoError(t, row.Click(proto.InputMouseButtonLeft, 1))
	wait(5*time.Second, "the trail", `(id) => document.getElementById('trail').dataset.loaded === id`, ev.Key())
	trigger, err := p.Eval(`() => document.querySelector('#trail [data-field=trigger]').textContent`)
	require.NoError(t, err)
	require.Equal(t, "mention", trigger.Value.Str(), "the trail the turn recorded")
}
