package outbound_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/outbound"
)

// intentLedger is a memLedger that can store a draft with its first intent
// in one call, and counts the calls of each kind.
type intentLedger struct {
	*memLedger
	combined, saveDraft int
	intents             []int // slots marked through MarkIntent
}

var _ outbound.DraftIntentLedger = (*intentLedger)(nil)

func (l *intentLedger) SaveDraft(ctx context.Context, d outbound.Draft) (outbound.Draft, error) {
	l.saveDraft++
	return l.memLedger.SaveDraft(ctx, d)
}

func (l *intentLedger) MarkIntent(ctx context.Context, turnID string, n int, fp string) error {
	l.intents = append(l.intents, n)
	return l.memLedger.MarkIntent(ctx, turnID, n, fp)
}

func (l *intentLedger) SaveDraftIntent(ctx context.Context, d outbound.Draft, fp string) (outbound.Draft, bool, error) {
	l.combined++
	stored, err := l.memLedger.SaveDraft(ctx, d)
	if err != nil {
		return outbound.Draft{}, false, err
	}
	if len(stored.Chunks) != len(d.Chunks) || stored.Chunks[0].Text != d.Chunks[0].Text {
		return stored, false, nil
	}
	return stored, true, l.memLedger.MarkIntent(ctx, d.TurnID, 0, fp)
}

func TestSendStoresDraftWithFirstIntent(t *testing.T) {
	t.Parallel()
	ch := chantest.New(chantest.Config{})
	led := &intentLedger{memLedger: newLedger()}
	s := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true})

	d, err := s.Send(t.Context(), reply(ch, "t1", "just one"))
	require.NoError(t, err)
	require.Len(t, d.MessageIDs, 1)
	require.Equal(t, 1, led.combined)
	require.Zero(t, led.saveDraft)
	require.Empty(t, led.intents, "the first intent went with the draft")
	require.Equal(t, outbound.SlotSent, led.slotsOf("t1")[0].State)

	d, err = s.Send(t.Context(), reply(ch, "t2", "one[persona-msg]two"))
	require.NoError(t, err)
	require.Len(t, d.MessageIDs, 2)
	require.Equal(t, 2, led.combined)
	require.Equal(t, []int{1}, led.intents, "later chunks are marked one by one")
	require.Equal(t, []string{"just one", "one", "two"}, texts(ch.Sent()))

	// The stored first intent is cleared when the platform refuses the
	// chunk, so the retry sends it.
	ch.FailNext(1, errors.New("http 500"))
	r := reply(ch, "t3", "again")
	r.Chat = channel.Chat{Kind: channel.Private, ID: "u1"}
	r.SessionKey = channel.SessionKey("", ch.Name(), ch.BotID(), r.Chat)
	_, err = s.Send(t.Context(), r)
	require.Error(t, err)
	require.Empty(t, led.slotsOf("t3"))
	_, err = s.Send(t.Context(), r)
	require.NoError(t, err)
	require.Equal(t, 3, led.combined, "a retry resumes the stored draft")
	require.Equal(t, outbound.SlotSent, led.slotsOf("t3")[0].State)
	require.Equal(t, []string{"just one", "one", "two", "again"}, texts(ch.Sent()))
}

// blockingSentLedger holds MarkSent until AfterSend ran.
type blockingSentLedger struct {
	*memLedger
	afterSend chan struct{}
}

func (l *blockingSentLedger) MarkSent(ctx context.Context, turnID string, n int, ids []string, at time.Time) error {
	<-l.afterSend
	return l.memLedger.MarkSent(ctx, turnID, n, ids, at)
}

// A delivered chunk's ledger write and AfterSend run side by side (a store
// can commit them together), and both are done when Send returns.
func TestSendBooksDeliveredChunkConcurrently(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ch := chantest.New(chantest.Config{})
		led := &blockingSentLedger{memLedger: newLedger(), afterSend: make(chan struct{})}
		state := &outbound.MemoryState{}
		s := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true, State: state,
			AfterSend: func(context.Context, outbound.Reply, int, outbound.Chunk, channel.Receipt) { close(led.afterSend) }})
		_, err := s.Send(t.Context(), reply(ch, "t1", "hello"))
		require.NoError(t, err)
		require.Equal(t, outbound.SlotSent, led.slotsOf("t1")[0].State)
		_, ok, err := state.GetState(t.Context(), reply(ch, "t1", "").SessionKey, "", outbound.StateLastBotMessage)
		require.NoError(t, err)
		require.True(t, ok, "the delivery's bookkeeping is done too")
	})
}
