package eventcenter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/eventcenter"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

func TestFamily(t *testing.T) {
	t.Parallel()
	for code, want := range map[outcome.Code]string{
		outcome.Replied:                 "replied",
		outcome.RepliedProactive:        "replied",
		"replied_safety_notice":         "replied",
		inbound.IgnoredStale:            "ignored",
		inbound.DroppedRetriesExhausted: "dropped",
		outcome.NoticePoke:              "notice",
		outcome.MergedIntoReply:         "other",
		outcome.SupersededRepeat:        "other",
		inbound.BackfillHistoryOnly:     "other",
		"acme_ignored_off_topic":        "ignored",
		"acme_thing":                    "other",
		"":                              "",
	} {
		require.Equal(t, want, eventcenter.Family(code), string(code))
	}
	require.Empty(t, eventcenter.Meaning("acme_thing"))
	require.Equal(t, "older than the replay cutoff", eventcenter.Meaning(inbound.IgnoredStale))
}
