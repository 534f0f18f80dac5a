package agent_test

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
)

var t0 = time.Date(2026, 7, 8, 9, 0, 0, 0, time.UTC)

func user(id, sender, text string, at time.Duration) agent.ChatMessage {
	return agent.ChatMessage{ID: id, SenderID: sender, SenderName: "name" + sender, Time: t0.Add(at), Text: text}
}

func bot(id, text string, at time.Duration) agent.ChatMessage {
	return agent.ChatMessage{ID: id, SenderID: "999", FromBot: true, Time: t0.Add(at), Text: text}
}

func fullInput(t *testing.T) agent.ContextInput {
	al := newAliaser(t, testSecret)
	return agent.ContextInput{
		Persona: "SOUL", ToolRules: "TOOLRULES", Summary: "SUMMARY",
		History:          []agent.ChatMessage{user("1", "11", "HIST1", 0), bot("2", "HIST2", time.Minute)},
		Chat:             channel.Chat{Kind: channel.Group, ID: "777"},
		PluginContext:    []string{"PLUGIN"},
		SessionState:     []string{"STATE"},
		CoreMemory:       []string{"CORE"},
		Memory:           []string{"MEMORY"},
		Notebook:         []string{"NOTEBOOK"},
		WorldBook:        []string{"WORLD"},
		SelfNotes:        []string{"SELF"},
		MediaIndex:       []string{"MEDIA"},
		RecentSources:    []string{"SOURCES"},
		RecentToolCalls:  []agent.ToolExchange{{Name: "TOOLCALL", Arguments: "{}", Result: "ok"}},
		Candidates:       []agent.ChatMessage{user("3", "12", "CANDIDATE", 2*time.Minute)},
		DependencyImages: []agent.Part{{ImageURL: "https://img.example/dep.png"}},
		Speaker:          agent.Speaker{ID: "11", Name: "Ann", Role: channel.RoleAdmin, Aliases: []string{"mira"}},
		Now:              t0.Add(3 * time.Minute),
		Current:          user("4", "11", "CURRENT", 3*time.Minute),
		Aliaser:          al,
	}
}

func TestBuildOrder(t *testing.T) {
	t.Parallel()
	asm := agent.NewContextBuilder(agent.ContextConfig{}).Build(fullInput(t))
	want := []string{"SOUL", "SUMMARY", "HIST1", "HIST2", "PLUGIN", "STATE", "CORE", "MEMORY", "NOTEBOOK", "WORLD", "SELF",
		"MEDIA", "SOURCES", "TOOLCALL", "CANDIDATE", "refers to", "Speaker:", "Now:", "persona-reply", "[current]"}
	require.Len(t, asm.Messages, len(want))
	for i, w := range want {
		require.Contains(t, asm.Messages[i].Content, w, "message %d", i)
	}
	require.Contains(t, asm.Messages[0].Content, agent.DefaultRules)
	require.Contains(t, asm.Messages[0].Content, "TOOLRULES")
	require.Equal(t, 4, asm.PrefixLen, "head, summary, two history messages")
	require.Equal(t, 1, asm.HeadLen)
	for i, m := range asm.Messages {
		require.Equal(t, i == 3, m.CacheBreakpoint, "message %d", i)
	}
	require.Equal(t, agent.RoleAssistant, asm.Messages[3].Role)
	require.Equal(t, agent.RoleUser, asm.Messages[len(asm.Messages)-1].Role)
	require.Len(t, asm.Messages[15].Parts, 1, "dependency image")
	require.Equal(t, agent.RoleUser, asm.Messages[15].Role)
	require.True(t, asm.HasImages())
	require.Equal(t, "1", asm.HistoryAnchor)
	require.NotEmpty(t, asm.PrefixHash)
	require.NotEmpty(t, asm.SummaryHash)
	for _, m := range asm.Messages[:asm.PrefixLen] {
		require.NotContains(t, m.Content, "Now:", "no clock before the breakpoint")
	}
	req := asm.Request(agent.PurposeChat)
	require.Equal(t, agent.PurposeChat, req.Purpose)
}

func TestBuildExtraAndEdit(t *testing.T) {
	t.Parallel()
	in := fullInput(t)
	in.Extra = []agent.Block{
		{Name: agent.BlockMemory, Layer: agent.LayerTurn, Priority: 1, Title: "[my memory]", Units: []agent.Unit{{Text: "MINE"}}},
		{Name: "weather", Layer: agent.LayerTurn, Priority: 5, Units: []agent.Unit{{Text: "SUNNY"}}},
	}
	b := agent.NewContextBuilder(agent.ContextConfig{Edit: func(blocks []agent.Block) []agent.Block {
		out := blocks[:0]
		for _, bl := range blocks {
			if bl.Name != agent.BlockNotebook {
				out = append(out, bl)
			}
		}
		return out
	}})
	asm := b.Build(in)
	var contents []string
	for _, m := range asm.Messages {
		contents = append(contents, m.Content)
	}
	all := strings.Join(contents, "|")
	require.Contains(t, all, "[my memory]\nMINE")
	require.NotContains(t, all, "MEMORY")
	require.NotContains(t, all, "NOTEBOOK")
	require.Less(t, strings.Index(all, "TOOLCALL"), strings.Index(all, "SUNNY"), "new block after the last of its layer")
	require.Less(t, strings.Index(all, "SUNNY"), strings.Index(all, "CANDIDATE"))
}

func TestBuildNoIDsWithoutAliaser(t *testing.T) {
	t.Parallel()
	in := fullInput(t)
	in.Aliaser = nil
	asm := agent.NewContextBuilder(agent.ContextConfig{}).Build(in)
	b := string(agent.AppendPromptBytes(nil, asm.Messages))
	require.NotContains(t, b, "777")
	require.Contains(t, b, "name11: HIST1")
}

func TestBudgetNumbers(t *testing.T) {
	t.Parallel()
	b := agent.NewBudget(0, 0)
	require.Equal(t, agent.Budget{Input: 123_776, History: 16_000, Memory: 2_400, CoreMemory: 600, Summary: 18_566}, b)
	small := agent.NewBudget(8_192, 4_096)
	require.Equal(t, 3_968, small.Input)
	require.Equal(t, 2_182, small.History)
	require.Equal(t, 396, small.Memory)
	require.Equal(t, 198, small.CoreMemory)
	require.Equal(t, 512, agent.NewBudget(1_000, 100).History, "history floor")
}

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, agent.EstimateTokens(""))
	require.Equal(t, 1, agent.EstimateTokens("abc"))
	require.Equal(t, 2, agent.EstimateTokens("abcd"))
	require.Equal(t, 4, agent.EstimateTokens("你好"))
	require.Equal(t, 2+4, agent.EstimateTokens("hello你好"))
	require.Equal(t, 1, agent.EstimateTokens("é"))
	require.Equal(t, 8+2, agent.EstimateMessage(agent.Message{Content: "hello"}))
	require.Equal(t, 8+85, agent.EstimateMessage(agent.Message{Parts: []agent.Part{{ImageURL: "x", Detail: "low"}}}))
}

func TestCurrentMessageCapped(t *testing.T) {
	t.Parallel()
	in := fullInput(t)
	in.Current.Text = strings.Repeat("é", 2500)
	asm := agent.NewContextBuilder(agent.ContextConfig{}).Build(in)
	last := asm.Messages[len(asm.Messages)-1].Content
	require.True(t, asm.TruncatedCurrent)
	require.Equal(t, 2000, strings.Count(last, "é"))
	require.True(t, strings.HasSuffix(last, "…"))
}

// history with turns: u1 ×2 within 120 s (one turn) + bot; u2; u1 after 5 min.
func TestTurnGroupingAndWholeUnits(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300) // 100 tokens
	hist := []agent.ChatMessage{
		user("1", "u1", long, 0), user("2", "u1", long, 90*time.Second), bot("3", long, 100*time.Second),
		user("4", "u2", long, 110*time.Second),
		user("5", "u1", long, 10*time.Minute), bot("6", long, 11*time.Minute), bot("7", long, 12*time.Minute),
	}
	in := agent.ContextInput{Persona: "p", History: hist, Current: user("8", "u2", "now?", 13*time.Minute)}
	// The history budget (512, the floor) drops the first turn as an epoch;
	// the input budget (600) is still exceeded, so the priority trim drops
	// the next oldest turn, whole.
	b := agent.NewContextBuilder(agent.ContextConfig{ContextWindow: 1_928, MaxOutput: 1_200})
	require.Equal(t, 600, b.Budget().Input)
	require.Equal(t, 512, b.Budget().History)
	asm := b.Build(in)
	require.LessOrEqual(t, asm.Tokens, 600)
	var kept []string
	for _, m := range asm.Messages[1:asm.PrefixLen] {
		kept = append(kept, string(m.Role))
	}
	// The last turn is user 5 + bots 6, 7: never split.
	require.Equal(t, []string{"user", "assistant", "assistant"}, kept)
	require.Equal(t, 1, asm.HistoryTurns)
	require.Equal(t, 2, asm.DroppedTurns)
	require.Equal(t, 1, asm.Trimmed[agent.BlockHistory])
}

func TestToolExchangeUnitDroppedWhole(t *testing.T) {
	t.Parallel()
	call := agent.Message{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{{ID: "c1", Name: "search", Arguments: json.RawMessage(`{"q":"` + strings.Repeat("a", 600) + `"}`)}}}
	result := agent.Message{Role: agent.RoleTool, ToolCallID: "c1", Content: strings.Repeat("r", 600)}
	small := agent.Message{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{{ID: "c2", Name: "clock"}}}
	smallRes := agent.Message{Role: agent.RoleTool, ToolCallID: "c2", Content: "09:00"}
	in := agent.ContextInput{Persona: "p", Current: user("1", "u", "hi", 0), Extra: []agent.Block{{
		Name: "tool_trace", Layer: agent.LayerTurn, Priority: 10,
		Units: []agent.Unit{{Messages: []agent.Message{small, smallRes}}, {Messages: []agent.Message{call, result}}},
	}}}
	b := agent.NewContextBuilder(agent.ContextConfig{ContextWindow: 1_000, MaxOutput: 500})
	asm := b.Build(in)
	var roles []agent.Role
	for _, m := range asm.Messages {
		roles = append(roles, m.Role)
	}
	// The big call and its result went together; the small pair stayed.
	require.Equal(t, []agent.Role{agent.RoleSystem, agent.RoleAssistant, agent.RoleTool, agent.RoleSystem, agent.RoleSystem, agent.RoleUser}, roles)
	require.Equal(t, "c2", asm.Messages[2].ToolCallID)
	require.Equal(t, 1, asm.Trimmed["tool_trace"])
}

func TestLayerCaps(t *testing.T) {
	t.Parallel()
	var mem []string
	for i := range 200 {
		mem = append(mem, "snippet "+strconv.Itoa(i)+" "+strings.Repeat("m", 90))
	}
	asm := agent.NewContextBuilder(agent.ContextConfig{}).Build(agent.ContextInput{Persona: "p", Memory: mem, CoreMemory: mem, Current: user("1", "u", "hi", 0)})
	var memTokens, coreTokens int
	for _, m := range asm.Messages {
		switch {
		case strings.HasPrefix(m.Content, "[Memory"):
			memTokens = agent.EstimateMessage(m)
			require.Contains(t, m.Content, "snippet 0 ", "most relevant first, trimmed from the end")
		case strings.HasPrefix(m.Content, "[Key facts]"):
			coreTokens = agent.EstimateMessage(m)
		}
	}
	require.LessOrEqual(t, memTokens, 2_400+8)
	require.Greater(t, memTokens, 2_200)
	require.LessOrEqual(t, coreTokens, 600+8)
	require.Greater(t, coreTokens, 500)
}

func TestTokenCounter(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	counter := agent.TokenCounterFunc(func(m agent.Message) int { calls.Add(1); return 10 })
	b := agent.NewContextBuilder(agent.ContextConfig{Counter: counter})
	asm := b.Build(fullInput(t))
	require.Positive(t, calls.Load())
	require.Positive(t, asm.Tokens)
}

// TestEpochs: the stable prefix only grows until the history overflows its
// budget, then the window jumps forward by at least half the budget at once.
func TestEpochs(t *testing.T) {
	t.Parallel()
	b := agent.NewContextBuilder(agent.ContextConfig{ContextWindow: 2_000, MaxOutput: 800})
	histBudget := b.Budget().History
	require.Equal(t, 589, histBudget)
	var hist []agent.ChatMessage
	anchor := ""
	var prev *agent.Assembled
	advances := 0
	for i := range 120 {
		cur := user(strconv.Itoa(i), "u"+strconv.Itoa(i%3), strings.Repeat("w", 60), time.Duration(i)*5*time.Minute)
		asm := b.Build(agent.ContextInput{Persona: "p", History: hist, HistoryAnchor: anchor, Current: cur})
		if prev != nil {
			if asm.EpochAdvanced {
				advances++
				require.NotEqual(t, anchor, asm.HistoryAnchor)
				// Dropped at least half the budget: the new window holds
				// at most half the budget plus the turns added since.
				require.False(t, asm.Extends(prev.State()))
			} else {
				if anchor != "" {
					require.Equal(t, anchor, asm.HistoryAnchor)
				}
				require.True(t, asm.Extends(prev.State()), "turn %d: prefix must extend the previous one", i)
			}
		}
		hTokens := 0
		for _, m := range asm.Messages[1:asm.PrefixLen] {
			hTokens += agent.EstimateMessage(m)
		}
		require.LessOrEqual(t, hTokens, histBudget)
		anchor, prev = asm.HistoryAnchor, asm
		hist = append(hist, cur)
	}
	// 120 turns of ~28 tokens into a 588-token window advancing by ≥ 294
	// tokens: about every 11 turns, never every turn.
	require.GreaterOrEqual(t, advances, 5)
	require.LessOrEqual(t, advances, 15)

	// Without an anchor, history passed from a fixed watermark gives the
	// same windows (epochs are counted from the first message given).
	asm1 := b.Build(agent.ContextInput{Persona: "p", History: hist[:100], Current: user("x", "u", "a", 0)})
	asm2 := b.Build(agent.ContextInput{Persona: "p", History: hist[:101], Current: user("y", "u", "b", 0)})
	if asm1.HistoryAnchor == asm2.HistoryAnchor {
		require.True(t, asm2.Extends(asm1.State()))
	}
}

func TestPrefixTrackerLogsUnexpectedChange(t *testing.T) {
	t.Parallel()
	var changed atomic.Int64
	tr := &agent.PrefixTracker{Logger: slog.New(countingHandler{slog.DiscardHandler, &changed})}
	b := agent.NewContextBuilder(agent.ContextConfig{})
	hist := []agent.ChatMessage{user("1", "a", "one", 0)}
	in := agent.ContextInput{Persona: "p", History: hist, Current: user("2", "a", "two", time.Minute)}
	require.True(t, tr.Observe("s", b.Build(in)))
	in.History = append(hist, user("2", "a", "two", time.Minute))
	require.True(t, tr.Observe("s", b.Build(in)), "grown history extends the prefix")
	require.True(t, tr.Observe("other", b.Build(in)))
	in.Persona = "p, edited"
	require.False(t, tr.Observe("s", b.Build(in)))
	require.EqualValues(t, 1, changed.Load())
	in.Summary = "new checkpoint"
	require.True(t, tr.Observe("s", b.Build(in)), "a summary advance may change the prefix")
	tr.Forget("s")
	in.Persona = "p"
	require.True(t, tr.Observe("s", b.Build(in)))
	require.EqualValues(t, 1, changed.Load())
}

func TestChatMessageFromEvent(t *testing.T) {
	t.Parallel()
	ev := &channel.Event{MessageID: "m1", Sender: channel.Sender{ID: "42", Name: "Ann"}, Time: t0, Kind: channel.KindMessage,
		Segments: []channel.Segment{channel.Quote("m0"), channel.Text("hey "), channel.Mention("43"), channel.Text("look"),
			channel.Image(channel.Media{URL: "https://x/y.png"})}}
	cm := agent.ChatMessageFromEvent(ev, false)
	require.Equal(t, "m0", cm.ReplyTo)
	al := newAliaser(t, testSecret)
	asm := agent.NewContextBuilder(agent.ContextConfig{}).Build(agent.ContextInput{Current: cm, Aliaser: al})
	last := asm.Messages[len(asm.Messages)-1].Content
	require.Equal(t, "[current] ["+al.Message("m1")+"] Ann ("+al.User("42")+") replying to an earlier message: hey @"+al.User("43")+" look[image]", last,
		"m0 is not in the request")
	_, _, known := al.Lookup(newAliaser(t, testSecret).Message("m0"))
	require.False(t, known, "an id the request does not show is not registered")

	al = newAliaser(t, testSecret)
	asm = agent.NewContextBuilder(agent.ContextConfig{}).Build(agent.ContextInput{Current: cm, Aliaser: al,
		History: []agent.ChatMessage{{ID: "m0", SenderID: "43", SenderName: "Bob", Time: t0.Add(-time.Minute), Text: "look at this"}}})
	last = asm.Messages[len(asm.Messages)-1].Content
	require.Equal(t, "[current] ["+al.Message("m1")+"] Ann ("+al.User("42")+") replying to "+al.Message("m0")+": hey @"+al.User("43")+" look[image]", last)
}

// TestPicturesLowerDetailBeforeHistoryGoes: over the budget, pictures are
// asked for in low detail first; history is dropped only if that is not
// enough. The caller's parts are not changed.
func TestPicturesLowerDetailBeforeHistoryGoes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300) // 100 tokens
	hist := []agent.ChatMessage{user("1", "u1", long, 0), bot("2", long, time.Minute)}
	parts := []agent.Part{{ImageURL: "data:image/png;base64,AAAA", Detail: "auto"}, {ImageURL: "data:image/png;base64,BBBB", Detail: "auto"}}
	cur := user("3", "u1", "look", 2*time.Minute)
	cur.Parts = parts
	in := agent.ContextInput{Persona: "p", History: hist, Current: cur}
	// Two high-detail pictures (2 × 765) do not fit 1,000 tokens with the
	// history; two low-detail ones (2 × 85) do.
	b := agent.NewContextBuilder(agent.ContextConfig{ContextWindow: 2_000, MaxOutput: 872})
	require.Equal(t, 1_000, b.Budget().Input)
	asm := b.Build(in)
	require.LessOrEqual(t, asm.Tokens, 1_000)
	require.Equal(t, 1, asm.HistoryTurns, "the history stayed")
	last := asm.Messages[len(asm.Messages)-1]
	require.Len(t, last.Parts, 2)
	for _, p := range last.Parts {
		require.Equal(t, "low", p.Detail)
	}
	require.Equal(t, "auto", parts[0].Detail, "the caller's parts are untouched")

	// Within the budget, the detail stays as asked.
	asm = agent.NewContextBuilder(agent.ContextConfig{}).Build(in)
	require.Equal(t, "auto", asm.Messages[len(asm.Messages)-1].Parts[0].Detail)
}
