package route_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/route"
)

func TestStripFences(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`{"a":1}`, `{"a":1}`},
		{"  {\"a\":1}\n", `{"a":1}`},
		{"```json\n{\"a\":1}\n```", `{"a":1}`},
		{"```JSON\n{\"a\":1}\n```\n", `{"a":1}`},
		{"```\n{\"a\":1}\n```", `{"a":1}`},
		{"```json{\"a\":1}```", `{"a":1}`},
		{"```{\"a\":1}```", `{"a":1}`},
		{"Here you go:\n```json\n{\"a\":1}\n```\nBye", `{"a":1}`},
		{"The answer is {\"a\":1}.", `{"a":1}`},
		{"```json\n{\"a\":\"x```y\"}\n```", "{\"a\":\"x```y\"}"},
		{"no json", "no json"},
		{"", ""},
		{"}{", "}{"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, route.StripFences(tt.in), "%q", tt.in)
	}
}

func TestParseRatings(t *testing.T) {
	t.Parallel()
	one := func(directed, score string) string {
		return `{"candidates":[{"message_id":"c1","relevance":{"directed":` + directed + `,"reason":"r"},"chat_in":{"score":` + score + `,"reason":"s"}}]}`
	}
	want1 := func(directed string, score float64) []route.Rating {
		return []route.Rating{{MessageID: "c1", Directed: directed, DirectedReason: "r", ChatIn: score, ChatInReason: "s"}}
	}
	tests := []struct {
		name string
		in   string
		want []route.Rating
		err  string
	}{
		{name: "valid", in: one(`"yes"`, "0.9"), want: want1("yes", 0.9)},
		{name: "no", in: one(`"no"`, "0"), want: want1("no", 0)},
		{name: "upper case and spaces", in: one(`" Yes "`, "1"), want: want1("yes", 1)},
		{name: "boolean directed", in: one("true", "0.5"), want: want1("yes", 0.5)},
		{name: "boolean false", in: one("false", "0.5"), want: want1("no", 0.5)},
		{name: "string true", in: one(`"true"`, "0.5"), want: want1("yes", 0.5)},
		{name: "numeric string score", in: one(`"no"`, `" 0.25"`), want: want1("no", 0.25)},
		{name: "integer score", in: one(`"no"`, "1"), want: want1("no", 1)},
		{name: "exponent score", in: one(`"no"`, "5e-1"), want: want1("no", 0.5)},
		{name: "fenced", in: "```json\n" + one(`"yes"`, "0.9") + "\n```", want: want1("yes", 0.9)},
		{name: "numeric id", in: `{"candidates":[{"message_id":7,"relevance":{"directed":"no"},"chat_in":{"score":0.1}}]}`,
			want: []route.Rating{{MessageID: "7", Directed: "no", ChatIn: 0.1}}},
		{name: "null reasons, unknown fields", in: `{"note":"x","candidates":[{"message_id":"c1","extra":1,"relevance":{"directed":"no","reason":null},"chat_in":{"score":0.1,"reason":null}}]}`,
			want: []route.Rating{{MessageID: "c1", Directed: "no", ChatIn: 0.1}}},
		{name: "empty candidates", in: `{"candidates":[]}`, want: []route.Rating{}},
		{name: "several", in: `{"candidates":[{"message_id":"c2","relevance":{"directed":"no","reason":"a"},"chat_in":{"score":0.1,"reason":"b"}},{"message_id":"c1","relevance":{"directed":"yes","reason":"c"},"chat_in":{"score":0.2,"reason":"d"}}]}`,
			want: []route.Rating{{MessageID: "c2", Directed: "no", DirectedReason: "a", ChatIn: 0.1, ChatInReason: "b"}, {MessageID: "c1", Directed: "yes", DirectedReason: "c", ChatIn: 0.2, ChatInReason: "d"}}},

		{name: "empty", in: "  ", err: "empty answer"},
		{name: "prose", in: "yes, reply", err: "invalid character"},
		{name: "array", in: `[{"message_id":"c1"}]`, err: `no "candidates" array`},
		{name: "object inside an array", in: `[` + one(`"yes"`, "1") + `]`, want: want1("yes", 1)},
		{name: "no candidates", in: `{"ratings":[]}`, err: `no "candidates" array`},
		{name: "null candidates", in: `{"candidates":null}`, err: `no "candidates" array`},
		{name: "two objects", in: one(`"yes"`, "1") + one(`"no"`, "0"), err: "invalid character"},
		{name: "maybe", in: one(`"maybe"`, "0.5"), err: `directed "maybe" is not "yes" or "no"`},
		{name: "numeric directed", in: one("0.5", "0.5"), err: "is not \"yes\" or \"no\""},
		{name: "score above 1", in: one(`"no"`, "1.5"), err: "outside [0,1]"},
		{name: "negative score", in: one(`"no"`, "-0.1"), err: "outside [0,1]"},
		{name: "text score", in: one(`"no"`, `"high"`), err: "not a number"},
		{name: "bool score", in: one(`"no"`, "true"), err: "not a number"},
		{name: "missing relevance", in: `{"candidates":[{"message_id":"c1","chat_in":{"score":0.1}}]}`, err: "no relevance.directed"},
		{name: "missing directed", in: `{"candidates":[{"message_id":"c1","relevance":{},"chat_in":{"score":0.1}}]}`, err: "no relevance.directed"},
		{name: "missing chat_in", in: `{"candidates":[{"message_id":"c1","relevance":{"directed":"no"}}]}`, err: "no chat_in.score"},
		{name: "missing score", in: `{"candidates":[{"message_id":"c1","relevance":{"directed":"no"},"chat_in":{"reason":"x"}}]}`, err: "no chat_in.score"},
		{name: "missing id", in: `{"candidates":[{"relevance":{"directed":"no"},"chat_in":{"score":0.1}}]}`, err: "has no message_id"},
		{name: "object id", in: `{"candidates":[{"message_id":{},"relevance":{"directed":"no"},"chat_in":{"score":0.1}}]}`, err: "neither a string nor a number"},
		{name: "duplicate id", in: `{"candidates":[{"message_id":"c1","relevance":{"directed":"no"},"chat_in":{"score":0.1}},{"message_id":"c1","relevance":{"directed":"no"},"chat_in":{"score":0.1}}]}`, err: "appears twice"},
		{name: "reason not a string", in: `{"candidates":[{"message_id":"c1","relevance":{"directed":"no","reason":3},"chat_in":{"score":0.1}}]}`, err: "reason 3 is not a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := route.ParseRatings(tt.in)
			if tt.err != "" {
				require.ErrorIs(t, err, route.ErrUnparsable)
				require.ErrorContains(t, err, tt.err)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// checkRatings asserts what every successful parse guarantees.
func checkRatings(t *testing.T, rs []route.Rating) {
	seen := map[string]bool{}
	for _, r := range rs {
		require.NotEmpty(t, r.MessageID)
		require.Equal(t, strings.TrimSpace(r.MessageID), r.MessageID)
		require.False(t, seen[r.MessageID])
		seen[r.MessageID] = true
		require.Contains(t, []string{route.DirectedYes, route.DirectedNo}, r.Directed)
		require.False(t, math.IsNaN(r.ChatIn))
		require.GreaterOrEqual(t, r.ChatIn, 0.0)
		require.LessOrEqual(t, r.ChatIn, 1.0)
	}
}

// FuzzParseRatings: the parser never panics, and whatever it accepts is a
// well-formed rating list.
func FuzzParseRatings(f *testing.F) {
	for _, s := range []string{
		rating("yes", 0.5), rating("no", 0), "```json\n" + rating("no", 1) + "\n```", `{"candidates":[]}`,
		`{"candidates":[{"message_id":1,"relevance":{"directed":true},"chat_in":{"score":"0.3"}}]}`,
		"", "{", "```", "```json", "null", `{"candidates":null}`, `{"candidates":[null]}`, `{"candidates":[{}]}`,
		`{"candidates":[{"message_id":"","relevance":{"directed":"no"},"chat_in":{"score":1e400}}]}`,
		"prose {\"candidates\":[]} prose",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := route.ParseRatings(s)
		if err != nil {
			require.ErrorIs(t, err, route.ErrUnparsable)
			require.Nil(t, rs)
			return
		}
		checkRatings(t, rs)
	})
}

// FuzzParseRatingsRoundTrip: a valid answer built from arbitrary values
// parses back to the same values, fenced or not.
func FuzzParseRatingsRoundTrip(f *testing.F) {
	f.Add("c1", true, 0.5, "because it says Mira", "fun topic", false)
	f.Add("m-42", false, 0.0, "", "", true)
	f.Add("数字", false, 1.0, "「引用」", "\"quoted\" ```", true)
	f.Fuzz(func(t *testing.T, id string, directed bool, score float64, why, chat string, fenced bool) {
		id = strings.TrimSpace(id)
		if id == "" || math.IsNaN(score) || math.IsInf(score, 0) {
			t.Skip()
		}
		score = math.Abs(math.Mod(score, 1))
		d := route.DirectedNo
		if directed {
			d = route.DirectedYes
		}
		body, err := json.Marshal(map[string]any{"candidates": []any{map[string]any{
			"message_id": id,
			"relevance":  map[string]any{"directed": d, "reason": why},
			"chat_in":    map[string]any{"score": score, "reason": chat},
		}}})
		require.NoError(t, err)
		text := string(body)
		if fenced {
			text = "```json\n" + text + "\n```"
		}
		rs, err := route.ParseRatings(text)
		require.NoError(t, err, "%s", text)
		want := route.Rating{MessageID: id, Directed: d, DirectedReason: why, ChatIn: score, ChatInReason: chat}
		// encoding/json replaces invalid UTF-8 with U+FFFD; compare with
		// what was actually sent.
		var sent struct {
			Candidates []struct {
				MessageID string `json:"message_id"`
				Relevance struct{ Reason string }
				ChatIn    struct{ Reason string } `json:"chat_in"`
			}
		}
		require.NoError(t, json.Unmarshal(body, &sent))
		want.MessageID = strings.TrimSpace(sent.Candidates[0].MessageID)
		want.DirectedReason, want.ChatInReason = sent.Candidates[0].Relevance.Reason, sent.Candidates[0].ChatIn.Reason
		if want.MessageID == "" {
			t.Skip()
		}
		require.Equal(t, []route.Rating{want}, rs)
	})
}
