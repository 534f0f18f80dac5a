package agent_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	mrand "math/rand"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/quick"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
)

var testSecret = []byte("session-secret-0123456789")

func newAliaser(t testing.TB, secret []byte) *agent.Aliaser {
	t.Helper()
	a, err := agent.NewAliaser(secret)
	require.NoError(t, err)
	return a
}

func TestAliasFormatAndStability(t *testing.T) {
	t.Parallel()
	a, b := newAliaser(t, testSecret), newAliaser(t, testSecret)
	other := newAliaser(t, []byte("another-session-secret"))
	shape := regexp.MustCompile(`^[ugm]_[a-z2-7]{8}$`)
	for _, kind := range []agent.AliasKind{agent.AliasUser, agent.AliasGroup, agent.AliasMessage} {
		x := a.Alias(kind, "123456789")
		require.Regexp(t, shape, x)
		require.Equal(t, string(kind), x[:1])
		require.Equal(t, x, b.Alias(kind, "123456789"), "same secret, same alias")
		require.NotEqual(t, x, other.Alias(kind, "123456789"), "per-session secret")
	}
	require.NotEqual(t, a.User("1"), a.Message("1"), "kind is part of the HMAC input")
	require.Empty(t, a.User(""))
	kind, id, ok := a.Lookup(a.Group("-100200300"))
	require.True(t, ok)
	require.Equal(t, agent.AliasGroup, kind)
	require.Equal(t, "-100200300", id)

	_, err := agent.NewAliaser([]byte("short"))
	require.ErrorIs(t, err, agent.ErrShortSecret)
	s, err := agent.NewAliasSecret()
	require.NoError(t, err)
	require.Len(t, s, 32)
}

func TestAliasText(t *testing.T) {
	t.Parallel()
	a := newAliaser(t, testSecret)
	u, neg := a.User("12345"), a.User("-100777")
	for _, tc := range []struct{ in, want string }{
		{"hi 12345!", "hi " + u + "!"},
		{"12345", u},
		{"a12345 123456 12345b 12345_", "a12345 123456 12345b 12345_"},
		{"你好12345吗", "你好" + u + "吗"},
		{"ask @12345, or 12345.", "ask @" + u + ", or " + u + "."},
		{"chat -100777 and 100777 and x-100777", "chat " + neg + " and 100777 and x-100777"},
		{"no ids here", "no ids here"},
	} {
		require.Equal(t, tc.want, a.Text(tc.in), tc.in)
	}
	// Unregistered ids (message ids, strangers) are not free-text replaced.
	a.Message("55555")
	require.Equal(t, "55555", a.Text("55555"))
}

func TestAliasRestore(t *testing.T) {
	t.Parallel()
	a := newAliaser(t, testSecret)
	u, m, g := a.User("4242"), a.Message("-77"), a.Group("9000")
	stranger := newAliaser(t, []byte("someone-elses-secret")).User("1")

	got, unknown := a.Restore("[persona-reply:" + m + "] hey [persona-at:" + u + "] in " + g + ", not " + stranger + " or u_abc")
	require.Equal(t, "[persona-reply:-77] hey [persona-at:4242] in 9000, not "+stranger+" or u_abc", got)
	require.Equal(t, []string{stranger}, unknown)

	args := json.RawMessage(`{"user":"` + u + `","targets":["` + m + `",{"nested":"to ` + u + `"}],"n":12345678901234567890,"` + g + `":true,"esc":"<b>"}`)
	out, unknown, err := a.RestoreJSON(args)
	require.NoError(t, err)
	require.Empty(t, unknown)
	require.JSONEq(t, `{"user":"4242","targets":["-77",{"nested":"to 4242"}],"n":12345678901234567890,"9000":true,"esc":"<b>"}`, string(out))
	require.Contains(t, string(out), "<b>", "no HTML escaping")

	same := json.RawMessage(`{"q":"weather"}`)
	out, _, err = a.RestoreJSON(same)
	require.NoError(t, err)
	require.Equal(t, string(same), string(out), "unchanged JSON is returned as is")

	_, _, err = a.RestoreJSON(json.RawMessage(`{"broken":`))
	require.Error(t, err)

	calls, unknown := a.RestoreToolCalls([]agent.ToolCall{
		{ID: "c1", Name: "poke", Arguments: json.RawMessage(`{"user":"` + u + `"}`)},
		{ID: "c2", Name: "bad", Arguments: json.RawMessage(`not json ` + u)},
		{ID: "c3", Name: "who", Arguments: json.RawMessage(`{"user":"` + stranger + `"}`)},
	})
	require.JSONEq(t, `{"user":"4242"}`, string(calls[0].Arguments))
	require.Equal(t, `not json `+u, string(calls[1].Arguments), "invalid JSON is left for the loop's repair")
	require.Equal(t, []string{stranger}, unknown)

	resp := &agent.Response{Text: "hi " + u, ToolCalls: []agent.ToolCall{{Name: "x", Arguments: json.RawMessage(`["` + m + `"]`)}}}
	require.Empty(t, a.RestoreResponse(resp))
	require.Equal(t, "hi 4242", resp.Text)
	require.JSONEq(t, `["-77"]`, string(resp.ToolCalls[0].Arguments))
}

// idGen makes platform-like ids: 6–12 digits, always with a 0, 1, 8 or 9
// (digits base32 never uses), so an id can never hide inside an alias, and
// sometimes negative.
func idGen(r *rand.Rand) string {
	n := 6 + r.IntN(7)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + r.IntN(10))
	}
	b[0] = "1891"[r.IntN(4)]
	s := string(b)
	if r.IntN(5) == 0 {
		s = "-" + s
	}
	return s
}

// conversation is a random turn input generated from a seed.
type conversation struct {
	users, groups, messages []string
	in                      agent.ContextInput
}

func genConversation(seed uint64) conversation {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var c conversation
	for range 2 + r.IntN(6) {
		c.users = append(c.users, idGen(r))
	}
	c.groups = []string{idGen(r)}
	words := []string{"hello", "trail", "@", "你好", "12", "map", "u_", "m_", ",", "!", "-", "id:", "(", ")"}
	text := func() string {
		var sb strings.Builder
		for range 1 + r.IntN(10) {
			switch r.IntN(5) {
			case 0: // a known id typed in free text
				sb.WriteString(c.users[r.IntN(len(c.users))])
			default:
				sb.WriteString(words[r.IntN(len(words))])
			}
			// Words are separated: an id glued to letters or digits
			// ("abc123") is not a typed id (exact token match).
			sb.WriteString([]string{" ", ",", ".", "!", "?", ":", ";", "你", "@", "(", ")", "\n"}[r.IntN(12)])
		}
		return sb.String()
	}
	msg := func() agent.ChatMessage {
		id := idGen(r)
		c.messages = append(c.messages, id)
		m := agent.ChatMessage{ID: id, SenderID: c.users[r.IntN(len(c.users))], SenderName: "N" + strconv.Itoa(r.IntN(9)),
			Time: time.Unix(1_750_000_000+int64(len(c.messages))*30, 0), FromBot: r.IntN(5) == 0}
		if len(c.messages) > 1 && r.IntN(3) == 0 {
			m.ReplyTo = c.messages[r.IntN(len(c.messages)-1)]
		}
		if r.IntN(2) == 0 {
			m.Text = text()
		} else {
			m.Segments = []channel.Segment{channel.Text(text()), channel.Mention(c.users[r.IntN(len(c.users))]), channel.Text(text())}
			if m.ReplyTo != "" {
				m.Segments = append(m.Segments, channel.Quote(m.ReplyTo))
			}
		}
		return m
	}
	in := agent.ContextInput{Persona: "You are Mira.", Chat: channel.Chat{Kind: channel.Group, ID: c.groups[0]}}
	for range r.IntN(30) {
		in.History = append(in.History, msg())
	}
	for range r.IntN(4) {
		in.Memory = append(in.Memory, text())
	}
	in.SessionState = []string{text()}
	in.RecentToolCalls = []agent.ToolExchange{{Name: "lookup", Arguments: `{"user":"` + c.users[0] + `"}`, Result: text()}}
	in.Candidates = []agent.ChatMessage{msg()}
	in.Current = msg()
	in.Current.FromBot = false
	sp := c.users[r.IntN(len(c.users))]
	in.Speaker = agent.Speaker{ID: sp, Name: "N", Role: channel.RoleMember, Aliases: []string{"mira", text()}}
	in.Now = time.Unix(1_750_100_000, 0)
	c.in = in
	return c
}

// TestAliasProperty: no real id from the input ever appears in a rendered
// request, and every alias in a reply maps back.
func TestAliasProperty(t *testing.T) {
	t.Parallel()
	b := agent.NewContextBuilder(agent.ContextConfig{})
	aliasRe := regexp.MustCompile(`\b[ugm]_[a-z2-7]{8}\b`)
	prop := func(seed uint64) bool {
		c := genConversation(seed)
		al := newAliaser(t, testSecret)
		for _, u := range c.users {
			al.User(u) // known participants
		}
		c.in.Aliaser = al
		asm := b.Build(c.in)
		rendered := string(agent.AppendPromptBytes(nil, asm.Messages))
		for _, ids := range [][]string{c.users, c.groups, c.messages} {
			for _, id := range ids {
				if strings.Contains(rendered, id) {
					t.Logf("seed %d: id %q leaked", seed, id)
					return false
				}
			}
		}
		// A reply that uses every alias of the request maps back to real ids.
		aliases := aliasRe.FindAllString(rendered, -1)
		if len(aliases) == 0 {
			return false
		}
		reply := "[persona-reply:" + strings.Join(aliases, "] [persona-at:") + "]"
		restored, unknown := al.Restore(reply)
		if len(unknown) > 0 || aliasRe.MatchString(restored) {
			t.Logf("seed %d: unknown %v in %q", seed, unknown, restored)
			return false
		}
		for _, a := range aliases {
			if _, _, ok := al.Lookup(a); !ok {
				return false
			}
		}
		args, _ := json.Marshal(map[string]any{"to": aliases, "nested": map[string]any{"first": aliases[0]}})
		out, unknown, err := al.RestoreJSON(args)
		return err == nil && len(unknown) == 0 && !aliasRe.Match(out)
	}
	require.NoError(t, quick.Check(prop, &quick.Config{MaxCount: 500, Rand: mrand.New(mrand.NewSource(4))}))
}

// The alias is the kind, '_' and the first 8 base32 characters of
// HMAC-SHA256(secret, kind‖0‖id), for every id in any order.
func TestAliasIsTheDocumentedHMAC(t *testing.T) {
	t.Parallel()
	want := func(kind agent.AliasKind, id string) string {
		m := hmac.New(sha256.New, testSecret)
		m.Write([]byte{byte(kind), 0})
		m.Write([]byte(id))
		enc := base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)
		return string(kind) + "_" + enc.EncodeToString(m.Sum(nil))[:8]
	}
	a := newAliaser(t, testSecret)
	for _, id := range []string{"10001", "-42", "", "a much longer platform id with spaces", "10001"} {
		if id == "" {
			require.Empty(t, a.User(id))
			continue
		}
		require.Equal(t, want(agent.AliasUser, id), a.User(id), "user %q", id)
		require.Equal(t, want(agent.AliasMessage, id), a.Message(id), "message %q", id)
		require.Equal(t, want(agent.AliasGroup, id), a.Group(id), "group %q", id)
	}
}

// A shared hash cache gives the same aliases as none, keeps secrets apart,
// and starts over when full.
func TestAliasSumsShareHashesAcrossTurns(t *testing.T) {
	t.Parallel()
	sums := agent.NewAliasSums(4)
	fresh := newAliaser(t, testSecret)
	otherFresh := newAliaser(t, []byte("another-session-secret"))
	for turn := range 3 {
		a, err := agent.NewAliaserWith(testSecret, sums)
		require.NoError(t, err)
		b, err := agent.NewAliaserWith([]byte("another-session-secret"), sums)
		require.NoError(t, err)
		for i := range 5 { // more ids than the cache holds
			id := strconv.Itoa(1000 + i)
			require.Equal(t, fresh.Message(id), a.Message(id), "turn %d id %s", turn, id)
			require.Equal(t, otherFresh.Message(id), b.Message(id), "the secret is part of the cache key")
			require.Equal(t, fresh.User(id), a.User(id), "so is the kind")
		}
		kind, id, ok := a.Lookup(fresh.Message("1003"))
		require.True(t, ok)
		require.Equal(t, agent.AliasMessage, kind)
		require.Equal(t, "1003", id)
	}
	_, err := agent.NewAliaserWith([]byte("short"), sums)
	require.ErrorIs(t, err, agent.ErrShortSecret)
	a, err := agent.NewAliaserWith(testSecret, nil)
	require.NoError(t, err)
	require.Equal(t, fresh.User("7"), a.User("7"), "nil: no cache")
}
