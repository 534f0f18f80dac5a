package agent_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
)

// cacheSession is one session of the history cache tests: its conversation,
// secret and the anchor its last turn returned.
type cacheSession struct {
	g      *groupChat
	secret []byte
	anchor string
}

// evolve changes s's history as a chat does between two turns: mostly new
// messages, sometimes an edited, recalled or newly resolved one, a summary
// that takes the oldest messages, or messages with mentions and quotes.
func (s *cacheSession) evolve() {
	g := s.g
	// A changed message is one of the newest: those are in the window.
	recent := func() int { return len(g.history) - 1 - g.rng.IntN(min(len(g.history), 30)) }
	switch r := g.rng.IntN(24); {
	case r == 0 && len(g.history) > 4: // an edit (a new value, as the history cache makes one)
		i := recent()
		g.history = slices.Clone(g.history)
		g.history[i].Text += " (edited)"
	case r == 1 && len(g.history) > 4: // a recall
		i := recent()
		g.history = slices.Delete(slices.Clone(g.history), i, i+1)
	case r == 2 && len(g.history) > 8: // a summary took the oldest messages
		g.history = g.history[2+g.rng.IntN(4):]
	case r == 3 && len(g.history) > 0: // a segment changed (a mention resolved)
		i := recent()
		g.history = slices.Clone(g.history)
		u := g.users[g.rng.IntN(len(g.users))]
		g.history[i].Segments = []channel.Segment{channel.Text(g.history[i].Text + " "), channel.Mention(u.ID)}
	case r == 4 && len(g.history) > 0: // the sender resolved to someone else
		i := recent()
		g.history = slices.Clone(g.history)
		u := g.users[g.rng.IntN(len(g.users))]
		g.history[i].SenderID = u.ID
	case r == 5 && len(g.history) > 0: // a new display name
		i := recent()
		g.history = slices.Clone(g.history)
		g.history[i].SenderName += "!"
	case r == 6 && len(g.history) > 1: // the quote resolved
		i := recent()
		g.history = slices.Clone(g.history)
		g.history[i].ReplyTo = g.history[g.rng.IntN(len(g.history))].ID
	case r == 7 && len(g.history) > 0: // one of the bot's messages is the user's after all
		i := recent()
		g.history = slices.Clone(g.history)
		g.history[i].FromBot = !g.history[i].FromBot
	case r == 8 && len(g.history) > 0: // the same words under another message id
		i := recent()
		g.history = slices.Clone(g.history)
		g.nextID++
		g.history[i].ID = strconv.Itoa(g.nextID)
	case r == 9 && len(g.history) > 0: // a bot message's quote is learned (or lost)
		i := recent()
		g.history = slices.Clone(g.history)
		if g.history[i].ReplyTo != "" {
			g.history[i].ReplyTo = ""
		} else {
			g.history[i].ReplyTo = g.history[g.rng.IntN(len(g.history))].ID
		}
	}
	for range 1 + g.rng.IntN(3) {
		m := g.userMessage()
		switch g.rng.IntN(8) {
		case 0, 1:
			u := g.users[g.rng.IntN(len(g.users))]
			m.Segments = []channel.Segment{channel.Mention(u.ID), channel.Text(m.Text), channel.Image(channel.Media{})}
		case 2: // a quote of an old message, often outside the window
			if len(g.history) > 0 {
				m.ReplyTo = g.history[g.rng.IntN(max(len(g.history)/4, 1))].ID
			}
		case 3: // a quote of a message never shown
			m.ReplyTo = "gone-" + strconv.Itoa(g.rng.IntN(5))
		case 4: // everyone
			m.Segments = []channel.Segment{channel.Text(m.Text + " "), channel.Mention(agent.MentionAll), channel.Text(" ok?")}
		}
		g.history = append(g.history, m)
		if g.rng.IntN(2) == 0 {
			// The bot's reply quotes what it answered, sometimes an older
			// message or one never shown.
			b := g.botMessage("sure, " + g.text())
			switch g.rng.IntN(6) {
			case 0:
			case 1:
				b.ReplyTo = g.history[g.rng.IntN(len(g.history))].ID
			case 2:
				b.ReplyTo = "gone-" + strconv.Itoa(g.rng.IntN(5))
			default:
				b.ReplyTo = m.ID
			}
			if g.rng.IntN(5) == 0 {
				b.Segments = []channel.Segment{channel.Mention(m.SenderID), channel.Text(" " + b.Text)}
			}
			g.history = append(g.history, b)
		}
	}
}

// buildPair builds the turn's request with both builders, each with its
// own Aliaser of the session's secret; when preUsers, both Aliasers first
// know some participants (as the memory block registers them). With
// extras the turn has same-turn candidates and memory, and its messages
// quote messages of the history.
func buildPair(t *testing.T, cached, plain *agent.ContextBuilder, s *cacheSession, preUsers []string, extras bool) (*agent.Assembled, *agent.Assembled, *agent.Aliaser, *agent.Aliaser) {
	t.Helper()
	cur := s.g.userMessage()
	in := benchInput(s.g, cur)
	in.History = s.g.history
	in.HistoryAnchor = s.anchor
	if s.g.rng.IntN(12) != 0 { // now and then the bot's id is not known
		in.BotID = "999"
	}
	if extras {
		quote := func() string {
			if len(s.g.history) == 0 || s.g.rng.IntN(4) == 0 {
				return ""
			}
			return s.g.history[s.g.rng.IntN(len(s.g.history))].ID
		}
		for range s.g.rng.IntN(3) {
			c := s.g.userMessage()
			c.ReplyTo = quote()
			in.Candidates = append(in.Candidates, c)
		}
		in.Current.ReplyTo = quote()
		if len(in.Candidates) > 0 && s.g.rng.IntN(3) == 0 {
			in.Current.ReplyTo = in.Candidates[0].ID
		}
		in.Memory = s.g.memory(s.g.rng.IntN(6))
	}
	var out [2]*agent.Assembled
	var als [2]*agent.Aliaser
	for i, b := range []*agent.ContextBuilder{cached, plain} {
		al, err := agent.NewAliaser(s.secret)
		require.NoError(t, err)
		for _, u := range preUsers {
			al.User(u)
		}
		in.Aliaser = al
		out[i], als[i] = b.Build(in), al
	}
	return out[0], out[1], als[0], als[1]
}

// requireSameBuild fails unless the two builds are the same request with
// the same Aliaser state, whose references are all to messages it shows.
func requireSameBuild(t *testing.T, step int, a, b *agent.Assembled, al, bl *agent.Aliaser) {
	t.Helper()
	require.Equal(t, b.Messages, a.Messages, "step %d", step)
	requireRefsShown(t, a.Messages, "step %d", step)
	require.Equal(t, b.PrefixHash, a.PrefixHash, "step %d", step)
	require.Equal(t, [5]any{b.HistoryAnchor, b.EpochAdvanced, b.HistoryTurns, b.DroppedTurns, b.Tokens},
		[5]any{a.HistoryAnchor, a.EpochAdvanced, a.HistoryTurns, a.DroppedTurns, a.Tokens}, "step %d", step)
	require.Equal(t, b.Trimmed, a.Trimmed, "step %d", step)
	require.Equal(t, agent.AliaserRegistrations(bl), agent.AliaserRegistrations(al), "step %d", step)
	// And they answer alike: restoring everything the request shows,
	// replacing ids in free text, and registering one more id.
	var all strings.Builder
	for _, m := range a.Messages {
		all.WriteString(m.Content)
		all.WriteString(" u_aaaaaaaa ")
	}
	ra, ua := al.Restore(all.String())
	rb, ub := bl.Restore(all.String())
	require.Equal(t, rb, ra, "step %d", step)
	require.Equal(t, ub, ua, "step %d", step)
	var ids strings.Builder
	for i := range 120 {
		fmt.Fprintf(&ids, "%d -%d ", 100000000+7919*(i%8), i)
	}
	require.Equal(t, bl.Text(ids.String()), al.Text(ids.String()), "step %d", step)
	extra := "later-" + strconv.Itoa(step)
	require.Equal(t, bl.User(extra), al.User(extra), "step %d", step)
	require.Equal(t, bl.Text(extra), al.Text(extra), "step %d", step)
}

// A builder with the history cache builds exactly the requests (and leaves
// the Aliaser exactly as) a builder without it does, over sessions whose
// histories grow, change, lose messages and move their window, with and
// without participants the Aliaser knew before the history.
func TestHistoryCacheBuildsTheSameRequests(t *testing.T) {
	cfg := agent.ContextConfig{ContextWindow: 6000, MaxOutput: 1000} // a small window: epochs advance
	cached := agent.NewContextBuilder(cfg)
	cfg.HistoryCache = -1
	plain := agent.NewContextBuilder(cfg)
	sessions := make([]*cacheSession, 3)
	for i := range sessions {
		sessions[i] = &cacheSession{g: newGroupChat(uint64(40 + i)), secret: []byte("session secret number " + strconv.Itoa(i))}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	advanced, pre := 0, 0
	for step := range 1500 {
		s := sessions[rng.IntN(len(sessions))]
		s.evolve()
		var preUsers []string
		if rng.IntN(5) == 0 {
			pre++
			for range 1 + rng.IntN(2) {
				preUsers = append(preUsers, s.g.users[rng.IntN(len(s.g.users))].ID)
			}
		}
		a, b, al, bl := buildPair(t, cached, plain, s, preUsers, false)
		requireSameBuild(t, step, a, b, al, bl)
		if a.EpochAdvanced {
			advanced++
		}
		if rng.IntN(10) != 0 { // now and then the anchor is not saved
			s.anchor = a.HistoryAnchor
		}
	}
	require.Greater(t, advanced, 10, "the window moved")
	require.Greater(t, pre, 100)
}

// The same with a budget so tight that the oldest history turns and the
// candidates are trimmed most turns: the quotes of what is left are
// rendered again alike, and no reference names a message the request lost.
func TestHistoryCacheBuildsTheSameRequestsWhenTrimmed(t *testing.T) {
	cfg := agent.ContextConfig{ContextWindow: 2100, MaxOutput: 500}
	cached := agent.NewContextBuilder(cfg)
	cfg.HistoryCache = -1
	plain := agent.NewContextBuilder(cfg)
	sessions := make([]*cacheSession, 2)
	for i := range sessions {
		sessions[i] = &cacheSession{g: newGroupChat(uint64(60 + i)), secret: []byte("trimmed session secret " + strconv.Itoa(i))}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	trimmed, earlier := 0, 0
	for step := range 600 {
		s := sessions[rng.IntN(len(sessions))]
		s.evolve()
		a, b, al, bl := buildPair(t, cached, plain, s, nil, true)
		requireSameBuild(t, step, a, b, al, bl)
		if a.Trimmed[agent.BlockHistory] > 0 {
			trimmed++
		}
		for _, m := range a.Messages {
			earlier += strings.Count(m.Content, "replying to an earlier message")
		}
		if rng.IntN(10) != 0 {
			s.anchor = a.HistoryAnchor
		}
	}
	require.Greater(t, trimmed, 200, "the budget trimmed the history")
	require.Greater(t, earlier, 200)
}

// Turns of one session built at once share the cache safely and each gets
// the request a builder without the cache makes (run with -race).
func TestHistoryCacheConcurrentTurns(t *testing.T) {
	cached := agent.NewContextBuilder(agent.ContextConfig{})
	plain := agent.NewContextBuilder(agent.ContextConfig{HistoryCache: -1})
	s := &cacheSession{g: newGroupChat(77), secret: []byte("one session's secret")}
	for round := range 40 {
		s.evolve()
		var wg sync.WaitGroup
		for range 4 {
			// Each turn its own conversation value: userMessage advances g.
			g := *s.g
			g.rng = rand.New(rand.NewPCG(uint64(round), 9))
			ts := &cacheSession{g: &g, secret: s.secret, anchor: s.anchor}
			wg.Go(func() {
				a, b, al, bl := buildPair(t, cached, plain, ts, nil, round%2 == 0)
				requireSameBuild(t, round, a, b, al, bl)
			})
		}
		wg.Wait()
	}
}

// The history cache decides that a message renders as before from the
// fields listed in sameRendered. A new ChatMessage field must be added
// there, or here when history rendering does not read it.
func TestSameRenderedCoversChatMessage(t *testing.T) {
	compared := []string{"ID", "SenderID", "SenderName", "FromBot", "Text", "ReplyTo", "Segments"}
	notRendered := []string{"Time", "Parts", "Transcript"}
	typ := reflect.TypeFor[agent.ChatMessage]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		require.True(t, slices.Contains(compared, name) || slices.Contains(notRendered, name),
			"ChatMessage.%s: does history rendering read it? (see sameRendered)", name)
	}
}
