package memory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/store"
)

// A OneBot group whose people have ten-digit QQ numbers.
const (
	qqBot   = "1499449412"
	qqGroup = "738291045"
	qqJie   = "1928374650" // 阿杰
	qqBea   = "2734019856" // Bea
	qqCy    = "3456789012" // Cy, only a fact subject
	msgOld  = "-2093847561"
	msgTyp  = "55512345"
)

var (
	qqChat    = channel.Chat{Kind: channel.Group, ID: qqGroup}
	qqSession = channel.SessionKey("", "onebot", qqBot, qqChat)
	// realIDs must never reach a model.
	realIDs = []string{qqBot, qqGroup, qqJie, qqBea, qqCy, strings.TrimPrefix(msgOld, "-"), msgTyp}
)

func qqEvent(id, sender, name, text string, at time.Time) channel.Event {
	ev := channel.Event{
		Platform: "onebot", BotID: qqBot, Kind: channel.KindMessage, Chat: qqChat, MessageID: id, Time: at,
		Sender: channel.Sender{ID: sender, Name: name}, Segments: []channel.Segment{channel.Text(text)},
	}
	ev.SessionKey = qqSession
	return ev
}

// qqGroupHistory writes the conversation and returns the new message.
func qqGroupHistory(t *testing.T, d *store.DB) memory.Entry {
	t.Helper()
	add(t, d, qqEvent(msgOld, qqBea, "Bea", "群号 "+qqGroup+"，有事找 "+qqJie, t0))
	add(t, d, qqEvent(msgTyp, qqJie, "阿杰", "@"+qqBot+" 你好", t0.Add(time.Minute)))
	own := qqEvent("60000001", qqBot, "persona", "你好阿杰！有什么事？", t0.Add(2*time.Minute))
	own.Kind = channel.KindSelf
	require.NoError(t, d.Append(t.Context(), memory.Entry{Key: own.Key(), SessionKey: qqSession, Direction: memory.Out, Event: own}))
	apply(t, d, memory.Change{Fact: memory.Fact{Scope: memory.ScopeUser, SubjectUserID: qqBea, Key: "drink",
		Content: qqBea + " 爱喝茶", Kind: memory.KindFact, SourceType: memory.Explicit, Confidence: 0.9, Importance: 0.8,
		SessionKey: qqSession, ChatKind: "group", Platform: "onebot", SourceMessageIDs: []string{"x"}}})
	apply(t, d, memory.Change{Fact: memory.Fact{Scope: memory.ScopeGroup, SubjectUserID: qqCy, Key: "admin",
		Content: "Cy 是群主", Kind: memory.KindFact, SourceType: memory.Explicit, Confidence: 0.9, Importance: 0.8,
		SessionKey: qqSession, ChatKind: "group", Platform: "onebot", SourceMessageIDs: []string{"y"}}})
	return add(t, d, qqEvent("60000002", qqJie, "阿杰", "我和 "+qqBea+" 下周去杭州，消息 "+msgTyp+" 里说过", t0.Add(3*time.Minute)))
}

// requireNoRealID fails when a recorded request shows any real id.
func requireNoRealID(t *testing.T, reqs []agent.Request) {
	t.Helper()
	require.NotEmpty(t, reqs)
	for _, req := range reqs {
		b, err := json.Marshal(req)
		require.NoError(t, err)
		for _, id := range realIDs {
			require.NotContains(t, string(b), id, "a %s request shows a real id", req.Purpose)
		}
		require.NotContains(t, string(b), "(id ")
	}
}

func newQQScope(t *testing.T) *agent.Scope {
	t.Helper()
	sc, err := agent.NewScope(qqSession, []byte("0123456789abcdef0123456789abcdef"), nil)
	require.NoError(t, err)
	return sc
}

// tripAnswer answers with the aliases of the scope the call carries: a
// fact about Bea given by her alias, with aliases in content and evidence.
func tripAnswer(ctx context.Context, _ agent.Request) (*agent.Response, error) {
	sc := agent.ScopeFrom(ctx)
	if sc == nil {
		return nil, fmt.Errorf("no scope in the context")
	}
	bea, jie := sc.User(qqBea), sc.User(qqJie)
	return &agent.Response{Text: `{"candidates":[
 {"op":"upsert","scope":"user","subject":"` + bea + `","key":"trip","kind":"episode","content":"下周和 ` + jie + ` 去杭州","evidence":"我和 ` + bea + ` 下周去杭州","confidence":0.9,"importance":0.7}]}`}, nil
}

func TestExtractionShowsNoRealIDs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// setup returns the model the extractor calls, the recorder behind
		// it and the ScopeSource (nil: standalone).
		setup func(sc *agent.Scope) (agent.Model, *agenttest.Model, agent.ScopeSource)
	}{
		{"scope source, plain model", func(sc *agent.Scope) (agent.Model, *agenttest.Model, agent.ScopeSource) {
			rec := agenttest.New().OnPurpose(agent.PurposeMemory, agenttest.Func(tripAnswer))
			return rec, rec, agent.ScopeSourceFunc(func(context.Context, string) (*agent.Scope, error) { return sc, nil })
		}},
		{"scope source, private model", func(sc *agent.Scope) (agent.Model, *agenttest.Model, agent.ScopeSource) {
			rec := agenttest.New().OnPurpose(agent.PurposeMemory, agenttest.Func(tripAnswer))
			src := agent.ScopeSourceFunc(func(context.Context, string) (*agent.Scope, error) { return sc, nil })
			return agent.Private(rec, src), rec, src
		}},
		{"standalone", func(*agent.Scope) (agent.Model, *agenttest.Model, agent.ScopeSource) {
			rec := agenttest.New().OnPurpose(agent.PurposeMemory, agenttest.Func(tripAnswer))
			return rec, rec, nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			d := openStore(t, clk, "")
			e := qqGroupHistory(t, d)
			sc := newQQScope(t)
			model, rec, src := tc.setup(sc)
			x, err := memory.NewExtractor(d, model, memory.ExtractConfig{Clock: clk, Owner: "w1", Scopes: src})
			require.NoError(t, err)
			_, err = x.Enqueue(t.Context(), e)
			require.NoError(t, err)
			n, err := x.RunOnce(t.Context(), 1)
			require.NoError(t, err)
			require.Equal(t, 1, n)

			reqs := rec.Requests()
			requireNoRealID(t, reqs)
			prompt := reqs[0].Messages[1].Content
			require.Contains(t, prompt, "NEW MESSAGE:\n[2026-03-01 12:03] 阿杰 (u_")
			require.Contains(t, prompt, "the bot (u_", "the bot is shown as itself")
			require.Contains(t, prompt, "Cy 是群主")
			require.Contains(t, reqs[0].Messages[0].Content, `"subject"`)
			if src != nil {
				require.Contains(t, prompt, "阿杰 ("+sc.User(qqJie)+")", "the session's aliases")
				require.Contains(t, prompt, "subject Bea ("+sc.User(qqBea)+")", "existing facts' subjects by alias")
				require.Contains(t, prompt, "群号 "+sc.Group(qqGroup))
			}

			facts, err := d.Facts(t.Context(), "onebot", qqBea)
			require.NoError(t, err)
			require.Len(t, facts, 2)
			trip := facts[1]
			require.Equal(t, "trip", trip.Key, "the alias subject is stored under the real id")
			require.Equal(t, "下周和 "+qqJie+" 去杭州", trip.Content, "stored text has real ids")
			require.Equal(t, "我和 "+qqBea+" 下周去杭州", trip.Evidence)
			none, err := d.Facts(t.Context(), "onebot", qqJie)
			require.NoError(t, err)
			require.Empty(t, none)
		})
	}
}

func TestExtractionSubjects(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	e := qqGroupHistory(t, d)
	sc := newQQScope(t)
	src := agent.ScopeSourceFunc(func(context.Context, string) (*agent.Scope, error) { return sc, nil })
	cand := func(field, subject, key string) string {
		return `{"op":"upsert","scope":"user",` + field + `:"` + subject + `","key":"` + key +
			`","content":"c ` + key + `","confidence":0.9,"importance":0.9}`
	}
	m := agenttest.New().OnPurpose(agent.PurposeMemory, agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
		sc := agent.ScopeFrom(ctx)
		cs := []string{
			cand(`"subject"`, sc.User(qqBea), "alias"),
			cand(`"subject"`, "@"+sc.User(qqBea), "at_alias"),
			cand(`"subject"`, "Bea ("+sc.User(qqBea)+")", "labelled"),
			cand(`"subject"`, qqBea, "real_id"), // as an agent.Private model returns it
			cand(`"subject_user_id"`, sc.User(qqBea), "old_field"),
			cand(`"subject"`, "Bea", "name"),
			cand(`"subject"`, sc.User(qqCy), "fact_subject"),
			cand(`"subject"`, "", "omitted"),
			cand(`"subject"`, "u_zzzzzzzz", "unknown_alias"),
			cand(`"subject"`, "9999999999", "unknown_id"),
			cand(`"subject"`, sc.User(qqBot), "the_bot"),
			cand(`"subject"`, sc.Group(qqGroup), "the_group"),
			cand(`"subject"`, "Nobody", "unknown_name"),
			`{"op":"upsert","scope":"group","subject":"u_zzzzzzzz","key":"group_unknown","content":"c","confidence":0.9,"importance":0.9}`,
		}
		return &agent.Response{Text: `{"candidates":[` + strings.Join(cs, ",") + `]}`}, nil
	}))
	x, err := memory.NewExtractor(d, m, memory.ExtractConfig{Clock: clk, Owner: "w1", Scopes: src, MaxCandidates: 20})
	require.NoError(t, err)
	_, err = x.Enqueue(t.Context(), e)
	require.NoError(t, err)
	_, err = x.RunOnce(t.Context(), 1)
	require.NoError(t, err)

	keys := func(user string) []string {
		fs, err := d.Facts(t.Context(), "onebot", user)
		require.NoError(t, err)
		var out []string
		for _, f := range fs {
			if f.Key != "drink" && f.Key != "admin" {
				out = append(out, f.Key)
			}
		}
		return out
	}
	require.Equal(t, []string{"alias", "at_alias", "labelled", "real_id", "old_field", "name"}, keys(qqBea))
	require.Equal(t, []string{"fact_subject"}, keys(qqCy))
	require.Equal(t, []string{"omitted"}, keys(qqJie), "no subject: the sender")
	require.Empty(t, keys(qqBot), "the bot's own memories are global")
	require.Equal(t, []string{"group_unknown"}, keys(""), "a chat fact keeps no unknown subject")
	for _, id := range []string{"u_zzzzzzzz", "9999999999", qqGroup} {
		require.Empty(t, keys(id))
	}
}

func TestSummaryShowsNoRealIDs(t *testing.T) {
	t.Parallel()
	for _, withSource := range []bool{true, false} {
		t.Run(fmt.Sprint("source=", withSource), func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			d := openStore(t, clk, "")
			sc := newQQScope(t)
			var src agent.ScopeSource
			if withSource {
				src = agent.ScopeSourceFunc(func(context.Context, string) (*agent.Scope, error) { return sc, nil })
			}
			var calls atomic.Int32
			m := agenttest.New().Otherwise(agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
				n := calls.Add(1)
				s := agent.ScopeFrom(ctx)
				return &agent.Response{Text: fmt.Sprintf("Topics: 阿杰 (%s) asked Bea (%s) #%d", s.User(qqJie), s.User(qqBea), n)}, nil
			}))
			s, err := memory.NewSummarizer(d, m, memory.SummaryConfig{Clock: clk, Epoch: 4, KeepRecent: 2, Scopes: src})
			require.NoError(t, err)
			addN := func(from, n int) {
				for i := from; i < from+n; i++ {
					sender, name := qqJie, "阿杰"
					if i%2 == 1 {
						sender, name = qqBea, "Bea"
					}
					add(t, d, qqEvent(fmt.Sprint(70000000+i), sender, name,
						fmt.Sprintf("msg %d: 群 %s, ask %s about %s", i, qqGroup, qqBea, msgTyp), t0.Add(time.Duration(i)*time.Second)))
				}
			}
			add(t, d, qqEvent(msgTyp, qqJie, "阿杰", "typed id", t0.Add(-time.Hour)))
			addN(0, 5) // 6 messages: the oldest 4 fold, 2 stay recent
			cp, changed, err := s.Refresh(t.Context(), qqSession)
			require.NoError(t, err)
			require.True(t, changed)
			require.Equal(t, 4, cp.Messages)
			addN(5, 4) // the next epoch folds the previous summary in
			_, changed, err = s.Refresh(t.Context(), qqSession)
			require.NoError(t, err)
			require.True(t, changed)

			reqs := m.Requests()
			require.Len(t, reqs, 2)
			requireNoRealID(t, reqs)
			require.Contains(t, reqs[0].Messages[1].Content, "阿杰 (u_")
			require.Equal(t, "Topics: 阿杰 ("+qqJie+") asked Bea ("+qqBea+") #1", cp.Text, "the stored summary has real ids")
			require.Contains(t, reqs[1].Messages[1].Content, "PREVIOUS SUMMARY:\nTopics: 阿杰 (u_")
		})
	}
}
