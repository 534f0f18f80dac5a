package eventcenter_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/eventcenter"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// TestCodesMatchREADME keeps the center's catalogue equal to the README's
// outcome table (which TestOutcomeTableMatchesCode keeps equal to the
// constants): same codes, owners and meanings, in the same order.
func TestCodesMatchREADME(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\| ([a-z/]+) \\| (.*) \\|$")
	var want []eventcenter.CodeInfo
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		code := outcome.Code(m[1])
		want = append(want, eventcenter.CodeInfo{Code: code, Owner: m[2], Family: eventcenter.Family(code), Meaning: m[3]})
	}
	require.NotEmpty(t, want)
	require.Equal(t, want, eventcenter.Codes(), "update the catalogue in codes.go from the README's outcome table")
	for _, c := range want {
		require.Equal(t, c.Meaning, eventcenter.Meaning(c.Code))
		require.True(t, c.Code.Valid())
	}
}

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
