package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
)

func newScope(t *testing.T) *agent.Scope {
	t.Helper()
	s, err := agent.NewScope("default:onebot:10001:group:738291045", []byte("0123456789abcdef0123456789abcdef"), nil)
	require.NoError(t, err)
	return s
}

func groupEvent() channel.Event {
	return channel.Event{Platform: "onebot", BotID: "1499449412", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: channel.Group, ID: "738291045"}, MessageID: "-2093847561", Time: time.Unix(1700000000, 0),
		Sender: channel.Sender{ID: "1928374650", Name: "阿杰"},
		Segments: []channel.Segment{channel.Quote("55512345"), channel.Mention("2734019856"), channel.Mention(agent.MentionAll),
			channel.Text("群号738291045, ask 1928374650 or -2093847561 about 12")}}
}

func TestScopeScrubAndRestore(t *testing.T) {
	s := newScope(t)
	ev := groupEvent()
	s.Learn(&ev)
	for _, id := range []string{"1499449412", "738291045", "1928374650", "2734019856", "-2093847561", "55512345"} {
		a, ok := s.Known(id)
		require.True(t, ok, id)
		require.NotEmpty(t, a)
	}
	_, ok := s.Known(agent.MentionAll)
	require.False(t, ok, "@all is not a participant")

	text := ev.Text()
	scrubbed := s.Scrub(text)
	for _, id := range []string{"738291045", "1928374650", "2093847561"} {
		require.NotContains(t, scrubbed, id)
	}
	require.Contains(t, scrubbed, "about 12", "short numbers are not ids")
	require.Contains(t, scrubbed, "群号"+s.Group("738291045"), "ids next to CJK text are found")
	back, unknown := s.Restore(scrubbed + " u_zzzzzzzz")
	require.Equal(t, text+" u_zzzzzzzz", back)
	require.Equal(t, []string{"u_zzzzzzzz"}, unknown)

	require.Equal(t, s.User("1499449412"), s.Bot())
	require.Equal(t, "阿杰", s.DisplayName("1928374650"))
	id, ok := s.UserByName("阿杰")
	require.True(t, ok)
	require.Equal(t, "1928374650", id)
}

func TestScopeNamesShared(t *testing.T) {
	s := newScope(t)
	s.Name("11111", "Bea")
	s.Name("22222", "bea")
	_, ok := s.UserByName("Bea")
	require.False(t, ok, "a name two people share names neither")
	s.Name("33333", "Cy")
	id, ok := s.UserByName("cy")
	require.True(t, ok)
	require.Equal(t, "33333", id)
}

func TestScopeSameAliasesAsAliaser(t *testing.T) {
	s := newScope(t)
	al := s.NewAliaser()
	require.Equal(t, al.User("1928374650"), s.User("1928374650"))
	require.Equal(t, al.Message("-5"), s.Message("-5"))
}

func TestScopeScrubRequest(t *testing.T) {
	s := newScope(t)
	ev := groupEvent()
	s.Learn(&ev)
	req := agent.Request{Purpose: agent.PurposeMemory, Messages: []agent.Message{
		{Role: agent.RoleUser, Content: "1928374650 said hi", Name: "1928374650",
			Parts: []agent.Part{{ImageURL: "https://gchat.qpic.cn/gchatpic_new/1928374650/738291045-1-AB/0"}, {ImageURL: "data:image/png;base64,AAAA"}}},
		{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{{ID: "c1", Name: "lookup",
			Arguments: json.RawMessage(`{"user_id":1928374650,"note":"from 738291045","n":12}`)}}},
	}}
	out := s.ScrubRequest(req)
	b, err := json.Marshal(out)
	require.NoError(t, err)
	for _, id := range []string{"1928374650", "738291045"} {
		require.NotContains(t, string(b), id)
	}
	require.Len(t, out.Messages[0].Parts, 1)
	require.True(t, strings.HasPrefix(out.Messages[0].Parts[0].ImageURL, "data:"))
	var args map[string]any
	require.NoError(t, json.Unmarshal(out.Messages[1].ToolCalls[0].Arguments, &args))
	require.Equal(t, s.User("1928374650"), args["user_id"])
	require.EqualValues(t, 12, args["n"])
	// The input is unchanged.
	require.Contains(t, req.Messages[0].Content, "1928374650")
	require.Len(t, req.Messages[0].Parts, 2)
}

func TestPrivateModel(t *testing.T) {
	s := newScope(t)
	ev := groupEvent()
	s.Learn(&ev)
	var seen agent.Request
	m := agent.ModelFunc(func(_ context.Context, req agent.Request) (*agent.Response, error) {
		seen = req
		u := s.User("1928374650")
		return &agent.Response{Text: "hi @" + u, ToolCalls: []agent.ToolCall{{ID: "1", Name: "t", Arguments: json.RawMessage(`{"who":"` + u + `"}`)}}}, nil
	})
	p := agent.Private(m, nil)
	req := agent.Request{Purpose: agent.PurposeAudit, Messages: []agent.Message{{Role: agent.RoleUser, Content: "Draft: @1928374650 hello"}}}

	_, err := p.Generate(t.Context(), req)
	require.ErrorIs(t, err, agent.ErrNoScope)
	var me *agent.Error
	require.True(t, errors.As(err, &me))
	require.False(t, agent.Transient(err))

	resp, err := p.Generate(agent.WithScope(t.Context(), s), req)
	require.NoError(t, err)
	require.NotContains(t, seen.Messages[0].Content, "1928374650")
	require.Equal(t, "hi @1928374650", resp.Text)
	require.JSONEq(t, `{"who":"1928374650"}`, string(resp.ToolCalls[0].Arguments))

	// A background job names its session; the source gives the scope.
	src := agent.ScopeSourceFunc(func(_ context.Context, key string) (*agent.Scope, error) {
		require.Equal(t, s.Session(), key)
		return s, nil
	})
	resp, err = agent.Private(m, src).Generate(agent.WithSession(t.Context(), s.Session()), req)
	require.NoError(t, err)
	require.Equal(t, "hi @1928374650", resp.Text)
	require.Equal(t, s.Session(), agent.SessionFrom(agent.WithScope(t.Context(), s)))
}
