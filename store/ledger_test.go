package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

// testDraft is a one-chunk reply draft of turn "turn".
func testDraft() outbound.Draft {
	return outbound.Draft{TurnID: "turn", SessionKey: "s", Chat: channel.Chat{Kind: channel.Private, ID: "u"},
		Chunks: []outbound.Chunk{{Text: "one"}}, Code: outcome.Replied}
}

func TestSaveDraftIntent(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	ctx := t.Context()
	dr := testDraft()

	got, intent, err := d.SaveDraftIntent(ctx, dr, "fp0")
	require.NoError(t, err)
	require.True(t, intent)
	require.Equal(t, dr, got)
	loaded, ok, err := d.LoadDraft(ctx, "turn")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, dr, loaded)
	slots, err := d.Slots(ctx, "turn")
	require.NoError(t, err)
	require.Equal(t, []outbound.Slot{{TurnID: "turn", N: 0, Fingerprint: "fp0", State: outbound.SlotIntent, IntentAt: t0}}, slots,
		"an intent is dated (reconciliation looks back to it)")

	_, intent, err = d.SaveDraftIntent(ctx, dr, "fp0")
	require.NoError(t, err)
	require.True(t, intent, "repeating the same draft and intent is fine")

	other := dr
	other.Chunks = []outbound.Chunk{{Text: "regenerated"}}
	got, intent, err = d.SaveDraftIntent(ctx, other, "fp-other")
	require.NoError(t, err)
	require.False(t, intent, "another draft is stored: the caller marks its first chunk")
	require.Equal(t, dr, got, "the first draft wins")
	slots, err = d.Slots(ctx, "turn")
	require.NoError(t, err)
	require.Len(t, slots, 1)
	require.Equal(t, "fp0", slots[0].Fingerprint)

	// A slot 0 with another fingerprint fails the call, and the draft is
	// not saved either.
	require.NoError(t, d.MarkIntent(ctx, "turn2", 0, "fp-old"))
	dr2 := dr
	dr2.TurnID = "turn2"
	_, _, err = d.SaveDraftIntent(ctx, dr2, "fp-new")
	require.ErrorIs(t, err, ErrFingerprintMismatch)
	_, ok, err = d.LoadDraft(ctx, "turn2")
	require.NoError(t, err)
	require.False(t, ok)

	_, _, err = d.SaveDraftIntent(ctx, outbound.Draft{}, "fp")
	require.ErrorIs(t, err, ErrInvalid)
}

func TestSaveDraftFirstWins(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	ctx := t.Context()
	dr := testDraft()
	got, err := d.SaveDraft(ctx, dr)
	require.NoError(t, err)
	require.Equal(t, dr, got, "a new draft comes back as given")

	other := dr
	other.Chunks = []outbound.Chunk{{Text: "regenerated"}}
	got, err = d.SaveDraft(ctx, other)
	require.NoError(t, err)
	require.Equal(t, dr, got, "the first draft wins")
	loaded, ok, err := d.LoadDraft(ctx, "turn")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, dr, loaded)

	_, err = d.SaveDraft(ctx, outbound.Draft{})
	require.ErrorIs(t, err, ErrInvalid)
}
