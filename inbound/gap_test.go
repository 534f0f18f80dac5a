package inbound

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
)

func TestSeqSet(t *testing.T) {
	t.Parallel()
	var s seqSet
	require.Zero(t, s.below(5))
	for _, q := range []int64{5, 3, 9, 3} {
		s.add(q)
	}
	require.Equal(t, []int64{3, 5, 9}, s.seqs)
	require.True(t, s.has(5))
	require.False(t, s.has(4))
	require.Equal(t, int64(5), s.below(9))
	require.Equal(t, int64(9), s.below(100))
	require.Zero(t, s.below(3))
	require.Equal(t, []int64{4, 6, 7, 8}, s.missing(3, 9))
	require.Empty(t, s.missing(5, 5))

	// Capped: the smallest seqs are forgotten, older ones are not added.
	var big seqSet
	for q := int64(1); q <= seqMemory+10; q++ {
		big.add(q)
	}
	require.Len(t, big.seqs, seqMemory)
	require.Equal(t, int64(11), big.seqs[0])
	require.False(t, big.add(1))
	require.Len(t, big.seqs, seqMemory)
}

func TestObserveLiveIgnores(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	h.run()
	h.connectedPastBackfills()
	base := channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindMessage, Chat: gA, MessageID: "m", Time: ct0}
	for name, mod := range map[string]func(*channel.Event){
		"no seq":   func(ev *channel.Event) { ev.Seq = 0 },
		"private":  func(ev *channel.Event) { ev.Chat = pAnn; ev.Seq = 50 },
		"notice":   func(ev *channel.Event) { ev.Kind = channel.KindNotice; ev.Seq = 60 },
		"backfill": func(ev *channel.Event) { ev.Source = channel.SourceBackfill; ev.Seq = 70 },
		"journal":  func(ev *channel.Event) { ev.Source = channel.SourceJournal; ev.Seq = 80 },
	} {
		ev := base
		mod(&ev)
		h.c.ObserveLive(t.Context(), ev)
		h.settle()
		require.Empty(t, h.logs.MustRecords(t, "backfill_gap_detected"), name)
	}
	// Seqs from backfill and journal still count as seen: 71 follows 70.
	ev := base
	ev.Seq = 71
	h.c.ObserveLive(t.Context(), ev)
	h.settle()
	require.Empty(t, h.logs.MustRecords(t, "backfill_gap_detected"))
	// A redelivery of a seen seq is no jump.
	h.c.ObserveLive(t.Context(), ev)
	h.settle()
	require.Empty(t, h.logs.MustRecords(t, "backfill_gap_detected"))

	// Without history, seqs are tracked but no gap check is scheduled.
	bare := newCoHarness(t, func(cfg *CoordinatorConfig, h *coHarness) { cfg.Channel = h.ch.Bare() })
	bare.run()
	bare.state(true, true)
	ev.Seq = 1
	bare.c.ObserveLive(t.Context(), ev)
	ev.Seq = 10
	bare.c.ObserveLive(t.Context(), ev)
	bare.settle()
	require.Empty(t, bare.logs.MustRecords(t, "backfill_gap_detected"))
}

// Everything at once from several goroutines, for the race detector.
func TestCoordinatorConcurrentUse(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	h.say(gA, bob, "hello")
	h.run()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				switch i % 5 {
				case 0:
					h.c.ReportState(t.Context(), channel.State{Connected: true, Online: i%10 == 0})
				case 1:
					h.c.ObserveLive(t.Context(), channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindMessage,
						Chat: gA, MessageID: fmt.Sprint(g, i), Seq: int64(g*1000 + i*3), Time: ct0})
				case 2:
					_ = h.c.Ready()
					_ = h.c.Cutoff()
				case 3:
					_ = h.c.RequestBackfill(time.Hour)
				case 4:
					h.clk.Advance(7 * time.Second)
				}
			}
		})
	}
	wg.Wait()
	h.c.ReportState(t.Context(), channel.State{Connected: true, Online: true})
	h.settle()
	h.advance(10 * time.Minute)
	_, err := h.ch.Say(t.Context(), gB, ann, "bye", chantest.WithSeq(1))
	require.NoError(t, err)
}
