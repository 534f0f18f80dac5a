package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

// TestStoredEventMatchesJSON: storedEvent gives exactly what decoding the
// stored JSON gives, for events with monotonic and zoned times, empty and
// nil slices, nested messages and raw payloads.
func TestStoredEventMatchesJSON(t *testing.T) {
	t.Parallel()
	shanghai := time.FixedZone("CST", 8*3600)
	times := []time.Time{
		{}, time.Now(), time.Now().UTC(), time.Date(2026, 3, 1, 12, 0, 0, 123456789, shanghai),
		time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("", -5*3600)), time.Unix(1700000000, 5).In(time.Local),
	}
	events := []channel.Event{
		{Platform: "p", Chat: channel.Chat{Kind: channel.Group, ID: "g"}, MessageID: "1"},
		{Platform: "p", Segments: []channel.Segment{}, Raw: json.RawMessage{}},
		{
			Platform: "p", BotID: "b", Kind: channel.KindMessage, Chat: channel.Chat{Kind: channel.Private, ID: "u"},
			SessionKey: "default:p:b:private:u", MessageID: "-5", Seq: 9, ToMe: true, Source: channel.SourceBackfill,
			Sender:   channel.Sender{ID: "u", Name: "名字", Role: channel.RoleAdmin, Level: 3},
			Segments: []channel.Segment{channel.Text("hi <b>"), channel.Mention("x"), channel.Image(channel.Media{URL: "u", Size: 3})},
			Quoted:   &channel.Quoted{MessageID: "0", Segments: []channel.Segment{}, FromBot: true},
			Notice:   &channel.Notice{Type: channel.NoticePoke, UserID: "x"},
			Raw:      json.RawMessage("{ \"a\" : [1, 2] }"),
		},
	}
	for _, tm := range times {
		for _, ev := range events {
			ev.Time = tm
			b, err := json.Marshal(ev)
			require.NoError(t, err)
			var want channel.Event
			require.NoError(t, json.Unmarshal(b, &want))
			got, err := storedEvent(&ev)
			require.NoError(t, err)
			require.Equal(t, want, got, "time %v", tm)
		}
	}
}

// The decode cache answers from memory only for the payload it holds: a
// row stored again with another payload is decoded again.
func TestEventCacheDecodesChangedPayloads(t *testing.T) {
	c := newEventCache()
	first := testEvent(channel.Group, "g", "1", t0, "first text")
	p1, err := json.Marshal(&first)
	require.NoError(t, err)
	c.put("k", p1, &first)
	got, err := c.decode("k", p1)
	require.NoError(t, err)
	require.Equal(t, "first text", got.Text())

	edited := first
	edited.Segments = []channel.Segment{channel.Text("edited text")}
	p2, err := json.Marshal(&edited)
	require.NoError(t, err)
	got, err = c.decode("k", p2)
	require.NoError(t, err)
	require.Equal(t, "edited text", got.Text(), "a changed payload is decoded, not served from the cache")
	got, err = c.decode("k", p2)
	require.NoError(t, err)
	require.Equal(t, "edited text", got.Text())

	_, err = c.decode("other", []byte("{not json"))
	require.Error(t, err)
}
