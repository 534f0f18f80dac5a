package gate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/gate/gatetest"
	"github.com/personakit/persona/outcome"
)

// TestDefaultChainOrder feeds one message that every one of the twelve
// gates would stop. The first gate in chain order must win and be named;
// then its cause is removed and the next gate must win, down to G12, and
// finally the message passes.
func TestDefaultChainOrder(t *testing.T) {
	t.Parallel()
	flags := gatetest.NewFlags()
	ctx := t.Context()
	tr := groupTurn()
	s := tr.SessionKey
	// An unprompted message, sent by a bot, with only a video, from a
	// sampled-out id.
	tr.Event.Sender.IsBot = true
	tr.Event.Segments = []channel.Segment{{Type: channel.SegVideo, Media: &channel.Media{URL: "v"}}}
	tr.Event.MessageID = sampledID(t, 0.01, false)
	tr.Event.Source = channel.SourceBackfill // so it cannot clear the unavailable mark

	quota := gate.NewFlagQuota(flags)
	cfg := gate.Config{
		Flags: flags, Quota: quota,
		Policy: gate.Policy{
			Disabled:       true,
			DisabledGroups: []string{"g1"},
			Quota:          gate.Quotas{User: 1},
			BotChat:        gate.BotChatOff,
			BlockedUsers:   []string{"u1"},
			Proactive:      gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatOff},
			SamplingRate:   0.01,
		},
	}
	rules, err := gate.Compile(cfg)
	require.NoError(t, err)
	require.NoError(t, rules.RecordModelCall(ctx, &tr.Event, t0))
	require.NoError(t, gate.MarkUnavailable(ctx, flags, s, t0, "kicked"))
	require.NoError(t, gate.MarkMuted(ctx, flags, s, t0.Add(time.Hour)))
	require.NoError(t, gate.Suppress(ctx, flags, s, "u1", t0.Add(time.Hour), "paused"))
	require.NoError(t, gate.OpenStopWindow(ctx, flags, s, t0, 0))

	steps := []struct {
		gate string
		code outcome.Code
		fix  func()
	}{
		{gate.NameUnavailableGroup, gate.IgnoredUnavailableGroup, func() { require.NoError(t, gate.ClearUnavailable(ctx, flags, s)) }},
		{gate.NameBotEnabled, gate.IgnoredBotDisabled, func() { cfg.Policy.Disabled = false }},
		{gate.NameGroupEnabled, gate.IgnoredGroupDisabled, func() { cfg.Policy.DisabledGroups = nil }},
		{gate.NameBotMuted, gate.IgnoredBotMuted, func() { require.NoError(t, gate.MarkMuted(ctx, flags, s, time.Time{})) }},
		{gate.NameModelQuota, gate.IgnoredModelQuota, func() { cfg.Policy.Quota = gate.Quotas{} }},
		{gate.NameResponseSuppression, gate.IgnoredResponseSuppression, func() { require.NoError(t, flags.ClearFlag(ctx, s, "u1", gate.FlagSuppressed)) }},
		{gate.NameBotChat, gate.IgnoredBotChatSuppressed, func() { cfg.Policy.BotChat = gate.BotChatOn }},
		{gate.NameVideo, gate.IgnoredVideo, func() { tr.Event.Segments = append(tr.Event.Segments, channel.Text("look")) }},
		{gate.NameReplyGate, gate.IgnoredBlockedUser, func() { cfg.Policy.BlockedUsers = nil }},
		{gate.NameProactiveSwitch, gate.IgnoredProactiveOff, func() { cfg.Policy.Proactive = gate.Proactive{} }},
		{gate.NameStopWindow, gate.IgnoredStopRequested, func() { require.NoError(t, flags.ClearFlag(ctx, s, "", gate.FlagStopWindow)) }},
		{gate.NameSampling, gate.IgnoredSampledOut, func() { cfg.Policy.SamplingRate = 0 }},
	}
	for i, st := range steps {
		rules, err := gate.Compile(cfg)
		require.NoError(t, err)
		v := rules.Chain().Check(ctx, tr)
		require.True(t, v.Stop, "step %d", i)
		require.Equal(t, st.gate, v.Gate, "step %d: the first stopping gate in chain order wins", i)
		require.Equal(t, st.code, v.Code, "step %d", i)
		require.NotEmpty(t, v.Reason)
		st.fix()
	}
	rules, err = gate.Compile(cfg)
	require.NoError(t, err)
	require.Equal(t, gate.Pass, rules.Chain().Check(ctx, tr))
}

// TestDefaultChainDirectSkipsUnpromptedGates: a direct message inside a
// stop window, with both proactive switches off and sampled out, passes.
func TestDefaultChainDirectSkipsUnpromptedGates(t *testing.T) {
	t.Parallel()
	flags := gatetest.NewFlags()
	tr := groupTurn()
	tr.Event.MessageID = sampledID(t, 0.01, false)
	rules, err := gate.Compile(gate.Config{Flags: flags, NoRouter: true, Policy: gate.Policy{
		SamplingRate: 0.01, Proactive: gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatOff},
	}})
	require.NoError(t, err)
	require.NoError(t, gate.OpenStopWindow(t.Context(), flags, tr.SessionKey, t0, 0))
	require.Equal(t, gate.NameProactiveSwitch, rules.Chain().Check(t.Context(), tr).Gate)
	direct(tr)
	require.Equal(t, gate.Pass, rules.Chain().Check(t.Context(), tr))
}

// TestDefaultChainQuietReply: the chain hands the quiet reply through.
func TestDefaultChainQuietReply(t *testing.T) {
	t.Parallel()
	chain, err := gate.Default(gate.Config{Flags: gatetest.NewFlags(), Policy: gate.Policy{
		ActiveHours: "08:00-12:00", QuietReply: "back at 8",
	}})
	require.NoError(t, err)
	tr := privateTurn()
	v := chain.Check(t.Context(), tr)
	require.Equal(t, gate.Verdict{Stop: true, Code: gate.IgnoredQuietHours, Gate: gate.NameReplyGate,
		Reason: "outside the active hours 08:00-12:00 (UTC)", Reply: "back at 8"}, v)
	v = chain.Check(t.Context(), tr)
	require.Empty(t, v.Reply, "once per hour")
}

// TestDefaultChainEditable: embedders insert, remove and replace built-in
// gates by name.
func TestDefaultChainEditable(t *testing.T) {
	t.Parallel()
	chain, err := gate.Default(gate.Config{Flags: gatetest.NewFlags(), Policy: gate.Policy{Disabled: true}})
	require.NoError(t, err)
	tr := groupTurn()
	require.Equal(t, gate.NameBotEnabled, chain.Check(t.Context(), tr).Gate)

	custom := gate.New("no_links", func(_ context.Context, tr *gate.Turn) gate.Verdict {
		if tr.Event.Has(channel.SegLink) {
			return gate.Stopped("ignored_links", "links are not answered here")
		}
		return gate.Pass
	})
	c2 := chain.Remove(gate.NameBotEnabled).Insert(gate.NameReplyGate, custom)
	require.Equal(t, gate.Pass, c2.Check(t.Context(), tr))
	tr.Event.Segments = append(tr.Event.Segments, channel.Segment{Type: channel.SegLink, URL: "https://x"})
	v := c2.Check(t.Context(), tr)
	require.Equal(t, "no_links", v.Gate)
	require.Equal(t, []string{gate.NameUnavailableGroup, gate.NameGroupEnabled, gate.NameBotMuted, gate.NameModelQuota,
		gate.NameResponseSuppression, gate.NameBotChat, gate.NameVideo, "no_links", gate.NameReplyGate,
		gate.NameProactiveSwitch, gate.NameStopWindow, gate.NameSampling}, names(c2))

	c3 := chain.Replace(gate.New(gate.NameBotEnabled, func(context.Context, *gate.Turn) gate.Verdict { return gate.Pass }))
	require.Equal(t, gate.Pass, c3.Check(t.Context(), groupTurn()))
}
