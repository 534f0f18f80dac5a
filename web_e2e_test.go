package persona_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	persona "github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// TestLinkTriggerReadsThePage: a link the reader can resolve makes an
// unprompted group message direct (priority 60); the page is read once per
// chat and shown to the model in the recent-sources block.
func TestLinkTriggerReadsThePage(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>Release notes</title></head><body><nav>menu</nav>
<article><p>Version 2 adds pictures and voice to every chat.</p></article></body></html>`)
	}))
	t.Cleanup(site.Close)
	reader := web.New(web.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat, agenttest.Reply("nice release"), agenttest.Reply("still nice"))
	h := newHarness(t, model, func(o *persona.Options) { o.Web = reader })

	link := site.URL + "/notes"
	ev := h.say(group1, bob, "look at "+link)
	o := h.outcome(ev)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	require.Equal(t, "link", o.Trail.Trigger)
	require.Contains(t, strings.Join(o.Trail.Notes, "\n"), "link read")
	r, err := h.p.Lookup(t.Context(), ev.Key())
	require.NoError(t, err)
	require.Equal(t, inbound.PriorityLink, r.Priority, "a resolvable link has priority 60, not 100")
	prompt := renderRequest(lastChat(model))
	require.Contains(t, prompt, "Release notes")
	require.Contains(t, prompt, "Version 2 adds pictures")
	require.EqualValues(t, 1, hits.Load())

	// The same page again: not read twice, still in the block.
	o = h.outcome(h.say(group1, bob, "did you see "+link+"#top ?"))
	require.Equal(t, outcome.Replied, o.Code)
	require.Contains(t, strings.Join(o.Trail.Notes, "\n"), "already read")
	require.EqualValues(t, 1, hits.Load())
	require.Contains(t, renderRequest(lastChat(model)), "Release notes")

	// A link nobody can resolve (a private name) is an ordinary message.
	o = h.outcome(h.say(group1, bob, "see http://printer.local/status"))
	require.NotEqual(t, outcome.Replied, o.Code)
}

// renderRequest joins a request's message texts.
func renderRequest(req agent.Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	return b.String()
}

// TestWebFetchFeedsRecentSources: a page the agent read with web_fetch is
// in the chat's recent sources on the next turn.
func TestWebFetchFeedsRecentSources(t *testing.T) {
	t.Parallel()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>Changelog</title></head><body><article><p>Faster queue, fewer writes.</p></article></body></html>`)
	}))
	t.Cleanup(site.Close)
	reader := web.New(web.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat,
		agenttest.ToolCall(web.ToolName, fmt.Sprintf(`{"url":%q}`, site.URL+"/changelog")),
		agenttest.ToolCall(agent.ToolFinalize, `{"text":"it got faster"}`),
		agenttest.ToolCall(agent.ToolFinalize, `{"text":"as I said"}`))
	h := newHarness(t, model, func(o *persona.Options) { o.Web, o.Agent = reader, true })
	require.Equal(t, outcome.Replied, h.outcome(h.say(dmAlice, alice, "what changed in the release?")).Code)
	line := "Changelog (" + site.URL + "/changelog): Faster queue, fewer writes"
	require.NotContains(t, renderRequest(lastChat(model)), line, "not a recent source yet when the turn started")
	require.Equal(t, outcome.Replied, h.outcome(h.say(dmAlice, alice, "and?")).Code)
	require.Contains(t, renderRequest(lastChat(model)), line, "the recent-sources block")
}
