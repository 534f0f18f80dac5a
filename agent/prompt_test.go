package agent_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
)

const persona = "You are Mira, a cheerful member of a hiking group."

var now = time.Date(2026, 7, 8, 9, 10, 0, 0, time.UTC)

func history() []agent.Line {
	return []agent.Line{
		{Speaker: "Ann", Text: "anyone up for Saturday?"},
		{Speaker: "Mira", FromBot: true, Text: "me! where to?"},
		{Speaker: "Bob", Text: "the ridge trail"},
	}
}

// breakpoint returns the index of the message carrying the cache
// breakpoint, failing unless there is exactly one.
func breakpoint(t *testing.T, msgs []agent.Message) int {
	t.Helper()
	at := -1
	for i, m := range msgs {
		if m.CacheBreakpoint {
			require.Equal(t, -1, at, "more than one cache breakpoint")
			at = i
		}
	}
	require.NotEqual(t, -1, at, "no cache breakpoint")
	return at
}

func TestPromptOrder(t *testing.T) {
	t.Parallel()
	msgs := agent.Prompt(agent.PromptInput{
		Persona: persona,
		History: history(),
		Current: agent.Line{Speaker: "Ann", Text: "Mira, you coming?"},
		Now:     now,
	})
	require.Equal(t, []agent.Message{
		{Role: agent.RoleSystem, Content: persona + "\n\n" + agent.DefaultRules},
		{Role: agent.RoleUser, Content: "Ann: anyone up for Saturday?"},
		{Role: agent.RoleAssistant, Content: "me! where to?"},
		{Role: agent.RoleUser, Content: "Bob: the ridge trail", CacheBreakpoint: true},
		{Role: agent.RoleSystem, Content: "Current time: 2026-07-08 09:10 UTC"},
		{Role: agent.RoleUser, Content: "[current] Ann: Mira, you coming?"},
	}, msgs)
}

func TestPromptSystemHead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   agent.PromptInput
		want string
	}{
		{name: "persona and default rules", in: agent.PromptInput{Persona: persona}, want: persona + "\n\n" + agent.DefaultRules},
		{name: "persona trimmed", in: agent.PromptInput{Persona: "\n  " + persona + "  \n\n"}, want: persona + "\n\n" + agent.DefaultRules},
		{name: "no persona", in: agent.PromptInput{}, want: agent.DefaultRules},
		{name: "blank persona", in: agent.PromptInput{Persona: " \n "}, want: agent.DefaultRules},
		{name: "custom rules", in: agent.PromptInput{Persona: persona, Rules: "Be brief."}, want: persona + "\n\nBe brief."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msgs := agent.Prompt(tt.in)
			require.Equal(t, agent.RoleSystem, msgs[0].Role)
			require.Equal(t, tt.want, msgs[0].Content)
		})
	}
}

func TestPromptSystemHeadHasNoTime(t *testing.T) {
	t.Parallel()
	in := agent.PromptInput{Persona: persona, Current: agent.Line{Speaker: "Ann", Text: "hi"}}
	a := agent.Prompt(func() agent.PromptInput { x := in; x.Now = now; return x }())
	b := agent.Prompt(func() agent.PromptInput {
		x := in
		x.Now = now.Add(26*time.Hour + 17*time.Minute)
		x.Zone = time.FixedZone("X", 5*3600)
		return x
	}())
	require.Equal(t, a[0], b[0], "the system head does not change with the time")
	for _, s := range []string{"2026", "09:10", "UTC"} {
		require.NotContains(t, a[0].Content, s)
	}
	require.NotContains(t, agent.DefaultRules, "2026")
}

func TestPromptBreakpointWithoutHistory(t *testing.T) {
	t.Parallel()
	msgs := agent.Prompt(agent.PromptInput{Persona: persona, Current: agent.Line{Speaker: "Ann", Text: "hi"}, Now: now})
	require.Len(t, msgs, 3)
	require.Equal(t, 0, breakpoint(t, msgs), "the breakpoint is on the system head")
	require.Equal(t, agent.RoleSystem, msgs[1].Role)
	require.True(t, strings.HasPrefix(msgs[1].Content, "Current time: "))
	require.Equal(t, agent.Message{Role: agent.RoleUser, Content: "[current] Ann: hi"}, msgs[2])
}

func TestPromptWithoutClock(t *testing.T) {
	t.Parallel()
	msgs := agent.Prompt(agent.PromptInput{Persona: persona, History: history(), Current: agent.Line{Speaker: "Ann", Text: "hi"}})
	require.Len(t, msgs, 1+3+1, "no clock message when Now is zero")
	require.Equal(t, 3, breakpoint(t, msgs))
	for _, m := range msgs {
		require.NotContains(t, m.Content, "Current time")
	}
	require.Equal(t, "[current] Ann: hi", msgs[len(msgs)-1].Content)
}

func TestPromptClockZone(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		zone *time.Location
		want string
	}{
		{name: "default UTC", zone: nil, want: "Current time: 2026-07-08 09:10 UTC"},
		{name: "fixed zone", zone: time.FixedZone("CST", 8*3600), want: "Current time: 2026-07-08 17:10 CST"},
		{name: "zone crossing midnight", zone: time.FixedZone("HST", -10*3600), want: "Current time: 2026-07-07 23:10 HST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msgs := agent.Prompt(agent.PromptInput{Persona: persona, History: history(), Current: agent.Line{Speaker: "A", Text: "x"}, Now: now, Zone: tt.zone})
			bp := breakpoint(t, msgs)
			require.Equal(t, agent.Message{Role: agent.RoleSystem, Content: tt.want}, msgs[bp+1], "the clock comes right after the breakpoint")
		})
	}
}

func TestPromptCurrentIsLastAndMarked(t *testing.T) {
	t.Parallel()
	msgs := agent.Prompt(agent.PromptInput{
		History: history(),
		Current: agent.Line{Speaker: "Bob", Text: "[current] is just text here"},
		Now:     now,
	})
	last := msgs[len(msgs)-1]
	require.Equal(t, agent.RoleUser, last.Role)
	require.Equal(t, "[current] Bob: [current] is just text here", last.Content)
	require.False(t, last.CacheBreakpoint)
	for _, m := range msgs[:len(msgs)-1] {
		require.False(t, strings.HasPrefix(m.Content, "[current]"), "only the last message is marked current: %q", m.Content)
	}
}

func TestPromptHistoryRoles(t *testing.T) {
	t.Parallel()
	msgs := agent.Prompt(agent.PromptInput{
		History: []agent.Line{
			{Speaker: "Mira", FromBot: true, Text: "first"},
			{Speaker: "Mira", FromBot: true, Text: "second"},
			{Speaker: "Ann", Text: "Mira: not the bot"},
		},
		Current: agent.Line{Speaker: "Ann", Text: "?"},
	})
	require.Equal(t, agent.Message{Role: agent.RoleAssistant, Content: "first"}, msgs[1], "bot turns carry no speaker prefix")
	require.Equal(t, agent.Message{Role: agent.RoleAssistant, Content: "second"}, msgs[2])
	require.Equal(t, agent.Message{Role: agent.RoleUser, Content: "Ann: Mira: not the bot", CacheBreakpoint: true}, msgs[3])
}

func TestPromptDoesNotModifyInput(t *testing.T) {
	t.Parallel()
	h := history()
	in := agent.PromptInput{Persona: persona, History: h, Current: agent.Line{Speaker: "A", Text: "x"}, Now: now}
	a := agent.Prompt(in)
	require.Equal(t, history(), h)
	require.Equal(t, a, agent.Prompt(in), "deterministic")
}

// TestPromptPrefixProperty simulates consecutive turns of one session: each
// turn's history is the previous history plus the previous current message
// and the bot's reply. The prompt of turn N+1 must start with the messages
// of turn N up to and including its breakpoint, byte for byte (only the
// breakpoint flag moves forward), so an upstream prefix cache hits.
func TestPromptPrefixProperty(t *testing.T) {
	t.Parallel()
	var hist []agent.Line
	currents := []agent.Line{
		{Speaker: "Ann", Text: "hi Mira"},
		{Speaker: "Bob", Text: "what's the plan?"},
		{Speaker: "Ann", Text: "ridge trail at 8?"},
		{Speaker: "Cat", Text: "count me in 😀"},
	}
	var prev []agent.Message
	for i, cur := range currents {
		msgs := agent.Prompt(agent.PromptInput{
			Persona: persona,
			History: hist,
			Current: cur,
			Now:     now.Add(time.Duration(i) * 7 * time.Minute),
		})
		bp := breakpoint(t, msgs)
		require.Equal(t, len(hist), bp, "turn %d: the breakpoint is on the last history message", i)
		require.Equal(t, agent.RoleSystem, msgs[bp+1].Role, "turn %d: the clock follows the breakpoint", i)
		if prev != nil {
			prevBP := breakpoint(t, prev)
			require.Greater(t, bp, prevBP, "turn %d: the breakpoint moves forward", i)
			require.Equal(t, withoutBreakpoints(prev[:prevBP+1]), withoutBreakpoints(msgs[:prevBP+1]),
				"turn %d does not extend the prefix of turn %d", i, i-1)
		}
		prev = msgs
		hist = append(hist, cur, agent.Line{Speaker: "Mira", FromBot: true, Text: "reply " + cur.Text})
	}
}

func withoutBreakpoints(msgs []agent.Message) []agent.Message {
	out := make([]agent.Message, len(msgs))
	for i, m := range msgs {
		m.CacheBreakpoint = false
		out[i] = m
	}
	return out
}
