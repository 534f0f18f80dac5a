package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

// BenchmarkHistoryRecent reads a private session's transcript the way a
// replied turn does (up to 400 entries of a 24-entry session, 256 sessions
// in the table), with a commit by another connection before every read, as
// on a busy pipeline: the read connection's page cache starts cold.
//
//	go test ./store -run xxx -bench HistoryRecent -benchmem
func BenchmarkHistoryRecent(b *testing.B) {
	d := open(b, clock.Real)
	ctx := b.Context()
	base := time.Now().Add(-time.Hour)
	const sessions, perSession = 256, 24
	session := func(i int) string {
		return channel.SessionKey("", "chantest", "bot", channel.Chat{Kind: channel.Private, ID: fmt.Sprint("u", i)})
	}
	for n := range perSession {
		for s := range sessions {
			kind, dir := channel.KindMessage, memory.In
			if n%2 == 1 {
				kind, dir = channel.KindSelf, memory.Out
			}
			ev := channel.Event{Platform: "chantest", BotID: "bot", Kind: kind,
				Chat:      channel.Chat{Kind: channel.Private, ID: fmt.Sprint("u", s)},
				MessageID: fmt.Sprint("m", n, "-", s), Time: base.Add(time.Duration(n*sessions+s) * time.Millisecond),
				Sender:   channel.Sender{ID: fmt.Sprint("u", s), Name: "User"},
				Segments: []channel.Segment{channel.Text(fmt.Sprint("message number ", n*sessions+s))}}
			require.NoError(b, d.Append(ctx, memory.Entry{SessionKey: session(s), Direction: dir, Event: ev}))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		require.NoError(b, d.MarkRecalled(ctx, "none", time.Time{})) // a commit
		b.StartTimer()
		hist, err := d.Recent(ctx, session(i%sessions), 400)
		if err != nil || len(hist) != perSession {
			b.Fatal(len(hist), err)
		}
	}
}
