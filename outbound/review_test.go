package outbound_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

func TestBasicReviewer(t *testing.T) {
	t.Parallel()
	type want struct {
		send bool
		text string
		code outcome.Code
	}
	tests := []struct {
		name   string
		text   string
		direct bool
		want   want
	}{
		// Silence.
		{name: "silent, direct", text: "[[SILENT]]", direct: true, want: want{code: outbound.IgnoredModelSilent}},
		{name: "silent, unprompted", text: "[[SILENT]]", want: want{code: outbound.IgnoredModelSilent}},
		{name: "silent with blanks and markers", text: " [[SILENT]] [persona-msg] \n", direct: true, want: want{code: outbound.IgnoredModelSilent}},
		{name: "silent with other control markers", text: "[[SILENT]][[NO_IMAGE]]", direct: true, want: want{code: outbound.IgnoredModelSilent}},
		{name: "silent marker next to text sends the text", text: "[[SILENT]]fine, one thing", direct: true, want: want{send: true, text: "fine, one thing", code: outcome.Replied}},
		{name: "silent wins over refuse", text: "[[REFUSE]][[SILENT]]", direct: true, want: want{code: outbound.IgnoredModelSilent}},

		// Refusal.
		{name: "refuse, direct", text: "[[REFUSE]]", direct: true, want: want{send: true, text: outbound.RefusalText, code: outcome.Replied}},
		{name: "refuse with blanks, direct", text: "  [[REFUSE]]\n", direct: true, want: want{send: true, text: outbound.RefusalText, code: outcome.Replied}},
		{name: "refuse, unprompted", text: "[[REFUSE]]", want: want{code: outbound.IgnoredNoNaturalReply}},
		{name: "refuse with text, direct", text: "[[REFUSE]]Not talking about that.", direct: true, want: want{send: true, text: "Not talking about that.", code: outcome.Replied}},
		{name: "refuse with text, unprompted", text: "[[REFUSE]]Not talking about that.", want: want{code: outbound.IgnoredNoNaturalReply}},

		// Empty.
		{name: "empty, direct", text: "", direct: true, want: want{send: true, text: outbound.FallbackText, code: outcome.RepliedFallback}},
		{name: "blank, direct", text: " \n\t", direct: true, want: want{send: true, text: outbound.FallbackText, code: outcome.RepliedFallback}},
		{name: "markers only, direct", text: "[persona-msg][persona-line]", direct: true, want: want{send: true, text: outbound.FallbackText, code: outcome.RepliedFallback}},
		{name: "pause only, direct", text: "[[PAUSE_30M]]", direct: true, want: want{send: true, text: outbound.FallbackText, code: outcome.RepliedFallback}},
		{name: "no image only, direct", text: "[[NO_IMAGE]]", direct: true, want: want{send: true, text: outbound.FallbackText, code: outcome.RepliedFallback}},
		{name: "empty, unprompted", text: "", want: want{code: outbound.IgnoredNoNaturalReply}},
		{name: "markers only, unprompted", text: " [persona-msg] ", want: want{code: outbound.IgnoredNoNaturalReply}},

		// Normal replies.
		{name: "reply, direct", text: "hi there", direct: true, want: want{send: true, text: "hi there", code: outcome.Replied}},
		{name: "reply, unprompted", text: "hi there", want: want{send: true, text: "hi there", code: outcome.RepliedProactive}},
		{
			name: "control markers stripped, split markers kept",
			text: "[[NO_IMAGE]]one[persona-msg]two[persona-line]three[[PAUSE_30M]]", direct: true,
			want: want{send: true, text: "one[persona-msg]two[persona-line]three", code: outcome.Replied},
		},
		{
			name: "control markers stripped, unprompted",
			text: "[[PAUSE_30M]]ok, I'll be quiet", want: want{send: true, text: "ok, I'll be quiet", code: outcome.RepliedProactive},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := outbound.BasicReviewer.Review(t.Context(), outbound.Proposal{TurnID: "t1", Text: tt.text, Direct: tt.direct})
			require.NoError(t, err)
			require.Equal(t, tt.want.send, v.Send, "send")
			require.Equal(t, tt.want.code, v.Code, "code")
			require.NotEmpty(t, v.Reason)
			if tt.want.send {
				require.Equal(t, tt.want.text, v.Text)
				require.True(t, v.Code.Replied())
				require.Equal(t, v.Text, outbound.StripControl(v.Text), "control markers never go out")
			} else {
				require.Empty(t, v.Text)
				require.False(t, v.Code.Replied())
			}
			require.True(t, v.Code.Valid())
		})
	}
}

func TestReviewerFunc(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	r := outbound.ReviewerFunc(func(_ context.Context, p outbound.Proposal) (outbound.Verdict, error) {
		if p.Owner {
			return outbound.Verdict{}, boom
		}
		return outbound.Verdict{Send: true, Text: p.Text + "!", Code: outcome.Replied}, nil
	})
	v, err := r.Review(t.Context(), outbound.Proposal{Text: "hi"})
	require.NoError(t, err)
	require.Equal(t, outbound.Verdict{Send: true, Text: "hi!", Code: outcome.Replied}, v)
	_, err = r.Review(t.Context(), outbound.Proposal{Owner: true})
	require.ErrorIs(t, err, boom)
}

func TestOutcomeCodesValid(t *testing.T) {
	t.Parallel()
	for _, c := range []outcome.Code{outbound.IgnoredModelSilent, outbound.IgnoredNoNaturalReply, outbound.DroppedSendRejected} {
		require.True(t, c.Valid(), "%s", c)
		require.False(t, c.Replied(), "%s", c)
	}
}
