package store

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
)

// marshalOrOurs encodes ev with appendEventJSON, falling back to Marshal as
// encodeEventRow does.
func marshalOrOurs(ev *channel.Event) ([]byte, error) {
	if b, ok := appendEventJSON(nil, ev); ok {
		return b, nil
	}
	return json.Marshal(ev)
}

// requireSameJSON checks that appendEventJSON writes exactly what Marshal
// writes, or leaves ev to Marshal.
func requireSameJSON(t *testing.T, ev *channel.Event) {
	t.Helper()
	want, werr := json.Marshal(ev)
	got, ok := appendEventJSON(nil, ev)
	if !ok {
		return // encodeEventRow falls back to Marshal
	}
	require.NoError(t, werr, "appendEventJSON encoded an event Marshal refuses")
	require.Equal(t, string(want), string(got))
}

var tricky = []string{
	"", "plain", "quote \" and backslash \\", "<b>&amp;</b>", "tab\tnew\nline\rret", "\b\f\x00\x01\x1f\x7f",
	"caf\u00e9 \u4f60\u597d \U0001f600", "bad \xff\xfe utf8 \xc3", "line\u2028para\u2029end", "\u2027\u202a",
	"\xed\xa0\x80 surrogate", "emoji at end \U0001f44d",
}

func pick(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return ""
	}
	s := tricky[r.IntN(len(tricky))]
	if r.IntN(2) == 0 {
		s += tricky[r.IntN(len(tricky))]
	}
	return s
}

func randomSender(r *rand.Rand) channel.Sender {
	return channel.Sender{ID: pick(r), Name: pick(r), Role: channel.Role(pick(r)), Level: r.IntN(3) - 1,
		LevelKnown: r.IntN(2) == 0, IsBot: r.IntN(2) == 0}
}

func randomSegments(r *rand.Rand) []channel.Segment {
	switch r.IntN(4) {
	case 0:
		return nil
	case 1:
		return []channel.Segment{}
	}
	segs := make([]channel.Segment, 1+r.IntN(3))
	for i := range segs {
		s := channel.Segment{Type: channel.SegmentType(pick(r)), Text: pick(r), UserID: pick(r), MessageID: pick(r),
			URL: pick(r), FaceID: pick(r)}
		if r.IntN(2) == 0 {
			s.Media = &channel.Media{URL: pick(r), FileID: pick(r), Name: pick(r), MIME: pick(r),
				Size: int64(r.IntN(3)) * 1000, SHA256: pick(r), Duration: r.IntN(3) * 7, Description: pick(r), Transcript: pick(r), Album: pick(r)}
		}
		segs[i] = s
	}
	return segs
}

func randomEvent(r *rand.Rand) channel.Event {
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("", 8*3600), time.FixedZone("X", -(5*3600 + 30*60)),
		time.FixedZone("odd", 37)}
	ev := channel.Event{
		Platform: pick(r), Profile: pick(r), BotID: pick(r), Kind: channel.EventKind(pick(r)),
		Chat:       channel.Chat{Kind: channel.ChatKind(pick(r)), ID: pick(r)},
		SessionKey: pick(r), MessageID: pick(r), Seq: int64(r.IntN(3)-1) * 123456789012,
		Time:   time.Unix(r.Int64N(4e9)-1e9, r.Int64N(1e9)*int64(r.IntN(2))).In(zones[r.IntN(len(zones))]),
		Sender: randomSender(r), Segments: randomSegments(r), ToMe: r.IntN(2) == 0, Source: channel.Source(pick(r)),
	}
	if r.IntN(5) == 0 {
		ev.Time = time.Time{}
	}
	if r.IntN(2) == 0 {
		ev.Quoted = &channel.Quoted{MessageID: pick(r), Sender: randomSender(r), Text: pick(r),
			Segments: randomSegments(r), FromBot: r.IntN(2) == 0}
	}
	if r.IntN(2) == 0 {
		ev.Notice = &channel.Notice{Type: pick(r), Operator: pick(r), UserID: pick(r), TargetMessageID: pick(r), Flag: pick(r), Comment: pick(r)}
	}
	switch r.IntN(5) {
	case 0:
		ev.Raw = json.RawMessage(` { "a" : [1, 2, "x<y & z>w"], "b" : null , "c":"\u2028"} `)
	case 1:
		ev.Raw = json.RawMessage(`not json`)
	case 2:
		ev.Raw = json.RawMessage{}
	}
	return ev
}

func TestEventJSONMatchesMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	fallbacks := 0
	for range 5000 {
		ev := randomEvent(r)
		if _, ok := appendEventJSON(nil, &ev); !ok {
			fallbacks++
		}
		requireSameJSON(t, &ev)
	}
	require.Less(t, fallbacks, 2500, "most events are encoded without Marshal")

	// The shapes the pipeline stores most, and the times Marshal refuses.
	common := testEvent(channel.Group, "g1", "42", t0, "hello <there> & good \"day\"")
	requireSameJSON(t, &common)
	for _, tm := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 37))} {
		ev := common
		ev.Time = tm
		_, ok := appendEventJSON(nil, &ev)
		require.False(t, ok, "%v is left to Marshal", tm)
		_, err := marshalOrOurs(&ev)
		_, werr := json.Marshal(&ev)
		require.Equal(t, werr == nil, err == nil)
	}
	// Every decoded form is the same event.
	b, err := marshalOrOurs(&common)
	require.NoError(t, err)
	var back channel.Event
	require.NoError(t, json.Unmarshal(b, &back))
	want, err := storedEvent(&common)
	require.NoError(t, err)
	require.Equal(t, want, back)
}

func FuzzEventJSON(f *testing.F) {
	for _, s := range tricky {
		f.Add(s, s, int64(0))
	}
	f.Fuzz(func(t *testing.T, a, b string, n int64) {
		ev := channel.Event{Platform: a, BotID: b, MessageID: a + b, Seq: n, Time: time.Unix(n%4e9, n%1e9).UTC(),
			Sender:   channel.Sender{ID: b, Name: a, Level: int(n % 7)},
			Segments: []channel.Segment{channel.Text(a), channel.Mention(b), {Type: channel.SegImage, Media: &channel.Media{Name: a, Size: n}}},
			Quoted:   &channel.Quoted{MessageID: b, Text: a}, Notice: &channel.Notice{Type: a, Operator: b},
			Raw: json.RawMessage(a)}
		requireSameJSON(t, &ev)
	})
}

// The outcome's token usage and outbound ids are encoded as Marshal
// encodes them.
func TestOutcomeJSONMatchesMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for range 3000 {
		ts := make([]inbound.Tokens, 1+r.IntN(4))
		ids := make([]string, 1+r.IntN(4))
		for i := range ts {
			ts[i] = inbound.Tokens{Purpose: pick(r), Input: r.IntN(1 << 20), CachedInput: r.IntN(1<<20) - 1<<19, Output: r.IntN(9)}
			if r.IntN(2) == 0 {
				ts[i].Model = pick(r)
			}
		}
		for i := range ids {
			ids[i] = pick(r)
		}
		want, err := json.Marshal(ts)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendTokensJSON(nil, ts)))
		want, err = json.Marshal(ids)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendStringsJSON(nil, ids)))
	}
}

func FuzzOutcomeJSON(f *testing.F) {
	for _, s := range tricky {
		f.Add(s, s, int64(0))
	}
	f.Fuzz(func(t *testing.T, a, b string, n int64) {
		ts := []inbound.Tokens{{Purpose: a, Model: b, Input: int(n), CachedInput: int(-n), Output: int(n >> 3)}, {Purpose: b}}
		want, err := json.Marshal(ts)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendTokensJSON(nil, ts)))
		want, err = json.Marshal([]string{a, b})
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendStringsJSON(nil, []string{a, b})))
	})
}

// The encoder writes every JSON field of the event types in Marshal's
// order: a field added to one of them fails here until appendEventJSON
// writes it too.
func TestEventJSONKnowsEveryField(t *testing.T) {
	known := map[reflect.Type][]string{
		reflect.TypeFor[channel.Event]():   {"platform", "profile", "bot_id", "kind", "chat", "session_key", "message_id", "seq", "time", "sender", "segments", "quoted", "to_me", "notice", "source", "raw"},
		reflect.TypeFor[channel.Chat]():    {"kind", "id"},
		reflect.TypeFor[channel.Sender]():  {"id", "name", "role", "level", "level_known", "is_bot"},
		reflect.TypeFor[channel.Segment](): {"type", "text", "user_id", "message_id", "media", "url", "face_id"},
		reflect.TypeFor[channel.Media]():   {"url", "file_id", "name", "mime", "size", "sha256", "duration", "description", "transcript", "album"},
		reflect.TypeFor[channel.Quoted]():  {"message_id", "sender", "text", "segments", "from_bot"},
		reflect.TypeFor[channel.Notice]():  {"type", "operator", "user_id", "target_message_id", "flag", "comment"},
		reflect.TypeFor[inbound.Tokens]():  {"purpose", "model", "input", "cached_input", "output"},
	}
	for typ, want := range known {
		var got []string
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.IsExported() && name != "-" {
				got = append(got, name)
			}
		}
		require.Equal(t, want, got, "%v: JSON fields", typ)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[channel.Event](), reflect.TypeFor[channel.Chat](),
		reflect.TypeFor[channel.Sender](), reflect.TypeFor[channel.Segment](), reflect.TypeFor[channel.Media](),
		reflect.TypeFor[channel.Quoted](), reflect.TypeFor[channel.Notice](), reflect.TypeFor[channel.EventKind](),
		reflect.TypeFor[channel.ChatKind](), reflect.TypeFor[channel.Role](), reflect.TypeFor[channel.SegmentType](),
		reflect.TypeFor[channel.Source](), reflect.TypeFor[inbound.Tokens]()} {
		for _, m := range []string{"MarshalJSON", "MarshalText"} {
			_, has := reflect.PointerTo(typ).MethodByName(m)
			require.False(t, has, "%v has %s: Marshal would use it", typ, m)
		}
	}
}
