package memory_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var (
	group1  = channel.Chat{Kind: channel.Group, ID: "g1"}
	group2  = channel.Chat{Kind: channel.Group, ID: "g2"}
	private = channel.Chat{Kind: channel.Private, ID: "u1"}
)

func session(c channel.Chat) string { return channel.SessionKey("", "onebot", "bot", c) }

// openStore opens a store at path (a fresh one when path is "").
func openStore(t *testing.T, clk clock.Clock, path string) *store.DB {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "p.db")
	}
	d, err := store.Open(path, store.Options{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func event(c channel.Chat, id, sender, name, text string, at time.Time) channel.Event {
	ev := channel.Event{
		Platform: "onebot", BotID: "bot", Kind: channel.KindMessage, Chat: c, MessageID: id, Time: at,
		Sender:   channel.Sender{ID: sender, Name: name},
		Segments: []channel.Segment{{Type: channel.SegText, Text: text}},
	}
	ev.SessionKey = session(c)
	return ev
}

func add(t *testing.T, d *store.DB, ev channel.Event) memory.Entry {
	t.Helper()
	e := memory.Entry{Key: ev.Key(), SessionKey: ev.SessionKey, Direction: memory.In, Event: ev}
	require.NoError(t, d.Append(t.Context(), e))
	return e
}

// fact is a user-scoped fact learned in chat c.
func fact(c channel.Chat, subject, key, content string, conf, imp float64) memory.Change {
	return memory.Change{Fact: memory.Fact{
		Scope: memory.ScopeUser, SubjectUserID: subject, Key: key, Content: content, Kind: memory.KindFact,
		SourceType: memory.Explicit, Confidence: conf, Importance: imp, SessionKey: session(c),
		ChatKind: string(c.Kind), Platform: "onebot", SourceMessageIDs: []string{"src-" + key},
	}}
}

func apply(t *testing.T, d *store.DB, cs ...memory.Change) memory.ApplyResult {
	t.Helper()
	res, err := d.ApplyChanges(t.Context(), cs)
	require.NoError(t, err)
	return res
}

func contents(rc memory.Recollection) []string {
	var out []string
	for _, f := range rc.Facts {
		out = append(out, f.Content)
	}
	return out
}

func snippetKeys(rc memory.Recollection) []string {
	var out []string
	for _, s := range rc.Snippets {
		out = append(out, s.Key)
	}
	return out
}
