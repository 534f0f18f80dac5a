package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
)

// soul is a SOUL.md of a typical size (about 2.5 KB).
var soul = `# Mira

You are Mira, 27, a cheerful member of a weekend hiking group. You work as a cartographer at a small
surveying company and you read weather charts for fun. You grew up near the coast and moved inland for
the mountains.

## Voice
- Warm, quick, a little teasing; bad puns about maps and weather are your trademark.
- Short messages, as people write in a group chat. Rarely more than two sentences.
- You switch to Chinese when someone writes in Chinese, and mix in English trail names.
- No emoji walls: one emoji at most, and usually none.

## What you care about
- Safety first: you check the forecast before every trip and say so when the weather looks bad.
- You remember who is new to the group and explain things to them without being condescending.
- You like planning: routes, buses, where to get coffee after the hike.
- You dislike gear snobbery and people who leave litter on the trail.

## Boundaries
- You are a member of the group, not its assistant. You don't answer everything; you join when you
  have something to add or someone talks to you.
- You don't pretend to have been on trips you weren't on; you say you'd like to join next time.
- You never share what one member told you in private with the group.
- If someone is rude, you stay friendly but brief; if it continues, you stop replying to them.

## Knowledge
- Local trails: the ridge trail (12 km, exposed, bad in fog), the lake loop (7 km, easy, busy on
  weekends), the summit path (steep, 900 m up, last bus back at 18:40).
- The group usually meets at the north bus station at 07:30 on Saturdays.
- Ann organises most trips; Bob always forgets his rain jacket; Chen takes the photos.
`

var groupWords = []string{"trail", "ridge", "rain", "boots", "coffee", "saturday", "map", "summit", "bus", "snacks",
	"tent", "weather", "fog", "photos", "lake", "上山", "下雨", "咖啡", "周末", "地图"}

// groupChat generates a seeded group conversation of n user messages from
// six participants (ids 9-digit numbers starting with 1).
type groupChat struct {
	rng     *rand.Rand
	users   []channel.Sender
	t       time.Time
	nextID  int
	history []agent.ChatMessage
}

func newGroupChat(seed uint64) *groupChat {
	g := &groupChat{rng: rand.New(rand.NewPCG(seed, 7)), t: time.Date(2026, 7, 8, 9, 0, 0, 0, time.UTC), nextID: 1_000_000}
	names := []string{"Ann", "Bob", "Chen", "Dana", "Eli", "Fay"}
	for i, n := range names {
		g.users = append(g.users, channel.Sender{ID: strconv.Itoa(100000000 + 7919*(i+1)), Name: n})
	}
	return g
}

func (g *groupChat) text() string {
	n := 3 + g.rng.IntN(14)
	words := make([]string, n)
	for i := range words {
		words[i] = groupWords[g.rng.IntN(len(groupWords))]
	}
	if g.rng.IntN(8) == 0 { // someone types another participant's id
		words[0] = g.users[g.rng.IntN(len(g.users))].ID
	}
	return strings.Join(words, " ")
}

func (g *groupChat) userMessage() agent.ChatMessage {
	u := g.users[g.rng.IntN(len(g.users))]
	g.t = g.t.Add(time.Duration(10+g.rng.IntN(200)) * time.Second)
	g.nextID++
	m := agent.ChatMessage{ID: strconv.Itoa(g.nextID), SenderID: u.ID, SenderName: u.Name, Time: g.t, Text: g.text()}
	if len(g.history) > 3 && g.rng.IntN(6) == 0 {
		m.ReplyTo = g.history[len(g.history)-1-g.rng.IntN(3)].ID
	}
	return m
}

func (g *groupChat) botMessage(text string) agent.ChatMessage {
	g.t = g.t.Add(5 * time.Second)
	g.nextID++
	return agent.ChatMessage{ID: strconv.Itoa(g.nextID), SenderID: "999", SenderName: "Mira", FromBot: true, Time: g.t, Text: text}
}

func (g *groupChat) memory(k int) []string {
	out := make([]string, k)
	for i := range out {
		u := g.users[g.rng.IntN(len(g.users))]
		out[i] = fmt.Sprintf("[2026-06-%02d] %s (%s): %s", 1+g.rng.IntN(28), u.Name, u.ID, g.text())
	}
	return out
}

// countingHandler counts log records by message.
type countingHandler struct {
	slog.Handler
	n *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "prompt_prefix_changed" {
		h.n.Add(1)
	}
	return nil
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// playGroup plays a conversation of total messages turn by turn through an
// agenttest model and returns the share of prompt bytes identical to the
// previous request's prefix.
func playGroup(t *testing.T, cfg agent.ContextConfig, total int) (share float64, epochs int) {
	t.Helper()
	secret := []byte("0123456789abcdef0123456789abcdef")
	b := agent.NewContextBuilder(cfg)
	g := newGroupChat(42)
	model := agenttest.New()
	n := 0
	model.Otherwise(agenttest.Func(func(context.Context, agent.Request) (*agent.Response, error) {
		n++
		if n%3 == 0 {
			return &agent.Response{Text: "sure, see you at the ridge " + strconv.Itoa(n)}, nil
		}
		return &agent.Response{Text: "[[SILENT]]"}, nil
	}))
	var changed atomic.Int64
	tracker := &agent.PrefixTracker{Logger: slog.New(countingHandler{slog.DiscardHandler, &changed})}
	anchor := ""
	for len(g.history) < total {
		cur := g.userMessage()
		al, err := agent.NewAliaser(secret) // a fresh scope per turn, as the pipeline does
		require.NoError(t, err)
		for _, u := range g.users {
			al.User(u.ID)
		}
		asm := b.Build(agent.ContextInput{
			Persona: soul, Summary: "", History: g.history, HistoryAnchor: anchor,
			Chat:   channel.Chat{Kind: channel.Group, ID: "555000111"},
			Memory: g.memory(3), Speaker: agent.Speaker{ID: cur.SenderID, Name: cur.SenderName, Role: channel.RoleMember},
			Now: cur.Time, Current: cur, Aliaser: al,
		})
		if asm.EpochAdvanced {
			epochs++
		}
		anchor = asm.HistoryAnchor
		require.True(t, tracker.Observe("group:555000111", asm), "prefix changed at message %d", len(g.history))
		resp, err := model.Generate(t.Context(), asm.Request(agent.PurposeChat))
		require.NoError(t, err)
		g.history = append(g.history, cur)
		if resp.Text != "[[SILENT]]" && len(g.history) < total {
			text, unknown := al.Restore(resp.Text)
			require.Empty(t, unknown)
			g.history = append(g.history, g.botMessage(text))
		}
	}
	require.Zero(t, changed.Load())
	reqs := model.Requests()
	var same, all int
	for i := 1; i < len(reqs); i++ {
		prev := agent.AppendPromptBytes(nil, reqs[i-1].Messages)
		cur := agent.AppendPromptBytes(nil, reqs[i].Messages)
		same += commonPrefix(prev, cur)
		all += len(cur)
	}
	return float64(same) / float64(all), epochs
}

func TestPromptPrefixShareGroup200(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		cfg       agent.ContextConfig
		minEpochs int
	}{
		{"default window", agent.ContextConfig{}, 0},
		// A 12k window: the history budget (55 %) overflows twice.
		{"small window with epochs", agent.ContextConfig{ContextWindow: 12_000, MaxOutput: 2_000}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			share, epochs := playGroup(t, tc.cfg, 200)
			t.Logf("200-message group: %.1f %% of prompt bytes identical to the previous request's prefix (%d epoch advances)", 100*share, epochs)
			require.GreaterOrEqual(t, share, 0.90)
			require.GreaterOrEqual(t, epochs, tc.minEpochs)
		})
	}
}
