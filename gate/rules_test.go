package gate_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/gate/gatetest"
	"github.com/personakit/persona/outcome"
)

// t0 is the decision time of the tests: Monday 14:00 UTC.
var t0 = time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC)

var errBroken = errors.New("store is down")

// groupTurn returns an unprompted live group message from u1 in g1.
func groupTurn() *gate.Turn {
	ev := channel.Event{
		Platform: "onebot", BotID: "bot", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: channel.Group, ID: "g1"}, MessageID: "m1", Time: t0.Add(-time.Second),
		Sender: channel.Sender{ID: "u1", Name: "Ann", Role: channel.RoleMember}, Source: channel.SourceLive,
		Segments: []channel.Segment{channel.Text("anyone up for lunch?")},
	}
	ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
	return &gate.Turn{Event: ev, SessionKey: ev.SessionKey, Now: t0}
}

func privateTurn() *gate.Turn {
	tr := groupTurn()
	tr.Event.Chat = channel.Chat{Kind: channel.Private, ID: "u1"}
	tr.Event.SessionKey = channel.SessionKey("", "onebot", "bot", tr.Event.Chat)
	tr.SessionKey = tr.Event.SessionKey
	tr.Direct, tr.Trigger = true, "private"
	return tr
}

func direct(tr *gate.Turn) { tr.Direct, tr.Trigger = true, "mention" }

// env is one test's gate setup.
type env struct {
	flags *gatetest.Flags
	quota *gate.FlagQuota
	rules *gate.Rules
}

// gateCase is one row of a per-gate table.
type gateCase struct {
	name  string
	cfg   func(c *gate.Config)
	setup func(t *testing.T, e *env)
	turn  func(tr *gate.Turn)
	// want is the stop code, "" for a pass.
	want   outcome.Code
	reason string
	// reply is the expected Verdict.Reply.
	reply string
	// err expects a failed verdict.
	err bool
	// after runs once the gate decided.
	after func(t *testing.T, e *env, v gate.Verdict)
}

func newEnv(t *testing.T, mod func(c *gate.Config)) *env {
	t.Helper()
	e := &env{flags: gatetest.NewFlags()}
	e.quota = gate.NewFlagQuota(e.flags)
	cfg := gate.Config{Flags: e.flags, Quota: e.quota}
	if mod != nil {
		mod(&cfg)
	}
	r, err := gate.Compile(cfg)
	require.NoError(t, err)
	e.rules = r
	return e
}

func pick(t *testing.T, c gate.Chain, name string) gate.Gate {
	t.Helper()
	for _, g := range c {
		if g.Name() == name {
			return g
		}
	}
	t.Fatalf("no gate %q", name)
	return nil
}

func runGate(t *testing.T, name string, cases []gateCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.cfg)
			if tc.setup != nil {
				tc.setup(t, e)
			}
			tr := groupTurn()
			if tc.turn != nil {
				tc.turn(tr)
			}
			g := pick(t, e.rules.Chain(), name)
			v := g.Check(t.Context(), tr)
			switch {
			case tc.err:
				require.False(t, v.Stop)
				require.ErrorIs(t, v.Err, errBroken)
				cv := gate.Chain{g}.Check(t.Context(), tr)
				require.Equal(t, name, cv.Gate, "a chain stops at a failed gate and names it")
			case tc.want == "":
				require.Equal(t, gate.Pass, v)
			default:
				require.True(t, v.Stop, "want %s, got pass", tc.want)
				require.NoError(t, v.Err)
				require.Equal(t, tc.want, v.Code)
				require.NotEmpty(t, v.Reason)
				require.Contains(t, v.Reason, tc.reason)
				require.Equal(t, tc.reply, v.Reply)
				require.Equal(t, name, gate.Chain{g}.Check(t.Context(), tr).Gate)
			}
			if tc.after != nil {
				tc.after(t, e, v)
			}
		})
	}
}

func setFlag(name, subject string, until time.Time, value string) func(t *testing.T, e *env) {
	return func(t *testing.T, e *env) {
		s := groupTurn().SessionKey
		require.NoError(t, e.flags.SetFlag(t.Context(), gate.Flag{SessionKey: s, Subject: subject, Name: name, Until: until, Value: value}))
	}
}

func broken(t *testing.T, e *env) { e.flags.FailWith(errBroken) }

func TestGateUnavailableGroup(t *testing.T) {
	t.Parallel()
	mark := func(at time.Time, reason string) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			require.NoError(t, gate.MarkUnavailable(t.Context(), e.flags, groupTurn().SessionKey, at, reason))
		}
	}
	stillMarked := func(want bool) func(t *testing.T, e *env, _ gate.Verdict) {
		return func(t *testing.T, e *env, _ gate.Verdict) {
			_, ok, err := e.flags.GetFlag(t.Context(), groupTurn().SessionKey, "", gate.FlagUnavailable)
			require.NoError(t, err)
			require.Equal(t, want, ok)
		}
	}
	runGate(t, gate.NameUnavailableGroup, []gateCase{
		{name: "no mark"},
		{name: "marked after the message", setup: mark(t0, "kicked by admin"), want: gate.IgnoredUnavailableGroup,
			reason: "no longer in this group (kicked by admin)", after: stillMarked(true)},
		{name: "marked at the same time", setup: mark(t0.Add(-time.Second), ""), want: gate.IgnoredUnavailableGroup, after: stillMarked(true)},
		{name: "newer live message clears the mark", setup: mark(t0.Add(-time.Minute), "kicked"), after: stillMarked(false)},
		{name: "source unset counts as live", setup: mark(t0.Add(-time.Minute), ""),
			turn: func(tr *gate.Turn) { tr.Event.Source = "" }, after: stillMarked(false)},
		{name: "newer backfilled message does not clear it", setup: mark(t0.Add(-time.Minute), ""),
			turn: func(tr *gate.Turn) { tr.Event.Source = channel.SourceBackfill }, want: gate.IgnoredUnavailableGroup, after: stillMarked(true)},
		{name: "direct messages stop too", setup: mark(t0, ""), turn: direct, want: gate.IgnoredUnavailableGroup},
		{name: "malformed mark is cleared by any live message",
			setup: setFlag(gate.FlagUnavailable, "", t0.Add(time.Hour), "garbage"), after: stillMarked(false)},
		{name: "expired mark", setup: setFlag(gate.FlagUnavailable, "", t0, "1 x")},
		{name: "private chat never checked", setup: func(t *testing.T, e *env) {
			require.NoError(t, gate.MarkUnavailable(t.Context(), e.flags, privateTurn().SessionKey, t0, ""))
			broken(t, e)
		}, turn: func(tr *gate.Turn) { *tr = *privateTurn() }},
		{name: "flags broken", setup: broken, err: true},
	})
}

func TestClearUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	s := groupTurn().SessionKey
	require.NoError(t, gate.MarkUnavailable(t.Context(), e.flags, s, t0, "gone"))
	require.NoError(t, gate.ClearUnavailable(t.Context(), e.flags, s))
	require.Equal(t, gate.Pass, pick(t, e.rules.Chain(), gate.NameUnavailableGroup).Check(t.Context(), groupTurn()))
}

func TestGateBotEnabled(t *testing.T) {
	t.Parallel()
	off := func(c *gate.Config) { c.Policy.Disabled = true }
	runGate(t, gate.NameBotEnabled, []gateCase{
		{name: "enabled by default"},
		{name: "disabled", cfg: off, want: gate.IgnoredBotDisabled, reason: "switched off"},
		{name: "disabled, direct", cfg: off, turn: direct, want: gate.IgnoredBotDisabled},
		{name: "disabled, private", cfg: off, turn: func(tr *gate.Turn) { *tr = *privateTurn() }, want: gate.IgnoredBotDisabled},
		{name: "disabled, owner", cfg: off, turn: func(tr *gate.Turn) { tr.Owner = true }, want: gate.IgnoredBotDisabled},
	})
}

func TestGateGroupEnabled(t *testing.T) {
	t.Parallel()
	runGate(t, gate.NameGroupEnabled, []gateCase{
		{name: "open by default"},
		{name: "disabled group by id", cfg: func(c *gate.Config) { c.Policy.DisabledGroups = []string{"g0", "g1"} },
			want: gate.IgnoredGroupDisabled, reason: "switched off in group g1"},
		{name: "disabled group by platform and id", cfg: func(c *gate.Config) { c.Policy.DisabledGroups = []string{"onebot:g1"} },
			want: gate.IgnoredGroupDisabled},
		{name: "disabled on another platform", cfg: func(c *gate.Config) { c.Policy.DisabledGroups = []string{"telegram:g1"} }},
		{name: "group switch", cfg: func(c *gate.Config) { c.Groups = map[string]gate.GroupPolicy{"g1": {Disabled: true}} },
			want: gate.IgnoredGroupDisabled},
		{name: "other group's switch", cfg: func(c *gate.Config) { c.Groups = map[string]gate.GroupPolicy{"g2": {Disabled: true}} }},
		{name: "allowlist, listed", cfg: func(c *gate.Config) {
			c.Policy.GroupAdmission, c.Policy.GroupAllowlist = gate.GroupsAllowlist, []string{"g1"}
		}},
		{name: "allowlist, listed with platform", cfg: func(c *gate.Config) {
			c.Policy.GroupAdmission, c.Policy.GroupAllowlist = gate.GroupsAllowlist, []string{"onebot:g1"}
		}},
		{name: "allowlist, not listed", cfg: func(c *gate.Config) {
			c.Policy.GroupAdmission, c.Policy.GroupAllowlist = gate.GroupsAllowlist, []string{"g2"}
		}, want: gate.IgnoredGroupDisabled, reason: "not on the group allowlist"},
		{name: "allowlist, empty", cfg: func(c *gate.Config) { c.Policy.GroupAdmission = gate.GroupsAllowlist },
			turn: direct, want: gate.IgnoredGroupDisabled},
		{name: "list ignored in open mode", cfg: func(c *gate.Config) { c.Policy.GroupAllowlist = []string{"g2"} }},
		{name: "allowlist does not apply to private chats", cfg: func(c *gate.Config) {
			c.Policy.GroupAdmission, c.Policy.DisabledGroups = gate.GroupsAllowlist, []string{"u1"}
		}, turn: func(tr *gate.Turn) { *tr = *privateTurn() }},
	})
}

func TestGateBotMuted(t *testing.T) {
	t.Parallel()
	mute := func(until time.Time) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			require.NoError(t, gate.MarkMuted(t.Context(), e.flags, groupTurn().SessionKey, until))
		}
	}
	runGate(t, gate.NameBotMuted, []gateCase{
		{name: "not muted"},
		{name: "muted", setup: mute(t0.Add(10 * time.Minute)), want: gate.IgnoredBotMuted, reason: "muted in this group until 2026-03-02 14:10 UTC"},
		{name: "muted, direct", setup: mute(t0.Add(time.Minute)), turn: direct, want: gate.IgnoredBotMuted},
		{name: "mute over", setup: mute(t0)},
		{name: "mute lifted", setup: mute(time.Time{})},
		{name: "private chat never checked", setup: broken, turn: func(tr *gate.Turn) { *tr = *privateTurn() }},
		{name: "flags broken", setup: broken, err: true},
	})
}

func TestGateModelQuota(t *testing.T) {
	t.Parallel()
	// used records n model calls for the message of groupTurn (same bot,
	// group and sender) at time at.
	used := func(n int, at time.Time, mod func(tr *gate.Turn)) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			tr := groupTurn()
			if mod != nil {
				mod(tr)
			}
			for range n {
				require.NoError(t, e.rules.RecordModelCall(t.Context(), &tr.Event, at))
			}
		}
	}
	limits := func(q gate.Quotas) func(c *gate.Config) { return func(c *gate.Config) { c.Policy.Quota = q } }
	otherSender := func(tr *gate.Turn) { tr.Event.Sender.ID = "u2" }
	otherGroup := func(tr *gate.Turn) {
		tr.Event.Chat.ID = "g2"
		tr.Event.SessionKey = channel.SessionKey("", "onebot", "bot", tr.Event.Chat)
		tr.SessionKey = tr.Event.SessionKey
	}
	runGate(t, gate.NameModelQuota, []gateCase{
		{name: "no limits", setup: used(100, t0, nil)},
		{name: "bot limit left", cfg: limits(gate.Quotas{Bot: 3}), setup: used(2, t0, nil)},
		{name: "bot limit used up", cfg: limits(gate.Quotas{Bot: 3}), setup: used(3, t0, nil),
			want: gate.IgnoredModelQuota, reason: "bot's daily model quota (3 calls)"},
		{name: "bot limit counts every group", cfg: limits(gate.Quotas{Bot: 3}), setup: used(3, t0, otherGroup),
			want: gate.IgnoredModelQuota, reason: "bot's"},
		{name: "group limit used up", cfg: limits(gate.Quotas{Group: 2}), setup: used(2, t0, otherSender),
			want: gate.IgnoredModelQuota, reason: "group's daily model quota (2 calls)"},
		{name: "group limit of another group", cfg: limits(gate.Quotas{Group: 2}), setup: used(2, t0, otherGroup)},
		{name: "user limit used up in another group", cfg: limits(gate.Quotas{User: 2}), setup: used(2, t0, otherGroup),
			want: gate.IgnoredModelQuota, reason: "sender's daily model quota (2 calls)"},
		{name: "user limit of another sender", cfg: limits(gate.Quotas{User: 2}), setup: used(2, t0, otherSender)},
		{name: "yesterday's calls do not count", cfg: limits(gate.Quotas{Bot: 1}), setup: used(5, t0.Add(-24*time.Hour), nil)},
		{name: "the day follows the policy zone", cfg: func(c *gate.Config) {
			c.Policy.Quota, c.Policy.Zone = gate.Quotas{Bot: 1}, "Etc/GMT-12" // UTC+12: t0 is 02:00 next day
		}, setup: used(1, t0.Add(-11*time.Hour), nil)},
		{name: "same zone day counts", cfg: func(c *gate.Config) {
			c.Policy.Quota, c.Policy.Zone = gate.Quotas{Bot: 1}, "Etc/GMT-12"
		}, setup: used(1, t0.Add(-time.Hour), nil), want: gate.IgnoredModelQuota},
		{name: "owner exempt", cfg: limits(gate.Quotas{Bot: 1, User: 1}), setup: used(3, t0, nil),
			turn: func(tr *gate.Turn) { tr.Owner = true }},
		{name: "group override lowers the limit", cfg: func(c *gate.Config) {
			c.Policy.Quota = gate.Quotas{User: 10}
			c.Groups = map[string]gate.GroupPolicy{"g1": {Quota: gate.Quotas{User: 1}}}
		}, setup: used(1, t0, nil), want: gate.IgnoredModelQuota},
		{name: "group override lifts the limit", cfg: func(c *gate.Config) {
			c.Policy.Quota = gate.Quotas{User: 1, Group: 1}
			c.Groups = map[string]gate.GroupPolicy{"g1": {Quota: gate.Quotas{User: -1, Group: -1}}}
		}, setup: used(3, t0, nil)},
		{name: "private chat has no group counter", cfg: limits(gate.Quotas{Group: 1}), setup: used(3, t0, nil),
			turn: func(tr *gate.Turn) { *tr = *privateTurn() }},
		{name: "private chat counts for the user", cfg: limits(gate.Quotas{User: 1}), setup: used(1, t0, nil),
			turn: func(tr *gate.Turn) { *tr = *privateTurn() }, want: gate.IgnoredModelQuota},
		{name: "counter read fails", cfg: limits(gate.Quotas{Bot: 1}), setup: broken, err: true},
	})
}

func TestQuotaKeys(t *testing.T) {
	t.Parallel()
	tr := groupTurn()
	bot, group, inGroup, user := gate.QuotaKeys(&tr.Event, "2026-03-02")
	require.Equal(t, gate.QuotaKey{Scope: gate.QuotaBot, ID: "default:onebot:bot", Day: "2026-03-02"}, bot)
	require.True(t, inGroup)
	require.Equal(t, gate.QuotaKey{Scope: gate.QuotaGroup, ID: "default:onebot:bot:group:g1", Day: "2026-03-02"}, group)
	require.Equal(t, gate.QuotaKey{Scope: gate.QuotaUser, ID: "default:onebot:bot:user:u1", Day: "2026-03-02"}, user)

	tr.Event.SessionKey = "" // computed when the pipeline did not stamp it
	_, group, _, _ = gate.QuotaKeys(&tr.Event, "d")
	require.Equal(t, "default:onebot:bot:group:g1", group.ID)

	p := privateTurn()
	_, _, inGroup, _ = gate.QuotaKeys(&p.Event, "d")
	require.False(t, inGroup)

	require.Equal(t, "2026-03-02", gate.QuotaDay(t0, nil))
	require.Equal(t, "2026-03-03", gate.QuotaDay(t0, time.FixedZone("x", 12*3600)))
}

func TestFlagQuota(t *testing.T) {
	t.Parallel()
	f := gatetest.NewFlags()
	q := gate.NewFlagQuota(f)
	k := gate.QuotaKey{Scope: gate.QuotaUser, ID: "a", Day: "2026-03-02"}
	n, err := q.Used(t.Context(), k)
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, q.Add(t.Context(), k, 2))
	require.NoError(t, q.Add(t.Context(), k, 1))
	n, err = q.Used(t.Context(), k)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = q.Used(t.Context(), gate.QuotaKey{Scope: gate.QuotaUser, ID: "a", Day: "2026-03-03"})
	require.NoError(t, err)
	require.Zero(t, n, "days are separate")
	require.ErrorContains(t, q.Add(t.Context(), gate.QuotaKey{Scope: gate.QuotaBot, ID: "a", Day: "someday"}, 1), "quota day")

	// Concurrent adds in one process are not lost.
	k2 := gate.QuotaKey{Scope: gate.QuotaBot, ID: "b", Day: "2026-03-02"}
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 25 {
				_ = q.Add(context.Background(), k2, 1)
			}
		}()
	}
	for range 8 {
		<-done
	}
	n, err = q.Used(t.Context(), k2)
	require.NoError(t, err)
	require.Equal(t, 200, n)
}

func TestRecordModelCallWithoutQuota(t *testing.T) {
	t.Parallel()
	r, err := gate.Compile(gate.Config{Flags: gatetest.NewFlags()})
	require.NoError(t, err)
	require.NoError(t, r.RecordModelCall(t.Context(), &groupTurn().Event, t0))
	// A Quota but no policy that sets a quota: nothing would read the
	// counters, so nothing is written.
	f := gatetest.NewFlags()
	r, err = gate.Compile(gate.Config{Flags: f, Quota: gate.NewFlagQuota(f)})
	require.NoError(t, err)
	f.FailWith(errBroken)
	require.NoError(t, r.RecordModelCall(t.Context(), &groupTurn().Event, t0))
	// A quota in force: the counters are written (here, they fail to be).
	r, err = gate.Compile(gate.Config{Flags: f, Quota: gate.NewFlagQuota(f),
		Policy: gate.Policy{Quota: gate.Quotas{User: 10}}})
	require.NoError(t, err)
	require.ErrorIs(t, r.RecordModelCall(t.Context(), &groupTurn().Event, t0), errBroken)
}

func TestGateResponseSuppression(t *testing.T) {
	t.Parallel()
	suppress := func(user string, until time.Time, reason string) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			require.NoError(t, gate.Suppress(t.Context(), e.flags, groupTurn().SessionKey, user, until, reason))
		}
	}
	runGate(t, gate.NameResponseSuppression, []gateCase{
		{name: "nobody paused"},
		{name: "sender paused", setup: suppress("u1", t0.Add(30*time.Minute), "asked for a break"),
			want: gate.IgnoredResponseSuppression, reason: "the sender is paused until 2026-03-02 14:30 UTC: asked for a break"},
		{name: "sender paused, direct", setup: suppress("u1", t0.Add(time.Minute), ""), turn: direct, want: gate.IgnoredResponseSuppression},
		{name: "sender paused, owner", setup: suppress("u1", t0.Add(time.Minute), ""), turn: func(tr *gate.Turn) { tr.Owner = true },
			want: gate.IgnoredResponseSuppression},
		{name: "someone else paused", setup: suppress("u2", t0.Add(time.Minute), "")},
		{name: "whole chat paused", setup: suppress("", t0.Add(time.Minute), "loop detected"),
			want: gate.IgnoredResponseSuppression, reason: "replies in this chat are paused"},
		{name: "pause over", setup: suppress("u1", t0, "")},
		{name: "a shorter pause does not shorten a longer one", setup: func(t *testing.T, e *env) {
			suppress("u1", t0.Add(time.Hour), "long")(t, e)
			suppress("u1", t0.Add(-time.Minute), "short")(t, e)
		}, want: gate.IgnoredResponseSuppression, reason: "long"},
		{name: "a longer pause extends", setup: func(t *testing.T, e *env) {
			suppress("u1", t0.Add(-time.Minute), "short")(t, e)
			suppress("u1", t0.Add(time.Hour), "long")(t, e)
		}, want: gate.IgnoredResponseSuppression, reason: "long"},
		{name: "sender without id checks the chat only", setup: suppress("", t0.Add(time.Minute), ""),
			turn: func(tr *gate.Turn) { tr.Event.Sender.ID = "" }, want: gate.IgnoredResponseSuppression},
		{name: "flags broken", setup: broken, err: true},
	})
}

func TestSuppressReadError(t *testing.T) {
	t.Parallel()
	f := gatetest.NewFlags()
	f.FailWith(errBroken)
	require.ErrorIs(t, gate.Suppress(t.Context(), f, "s", "u", t0, ""), errBroken)
}

func TestGateBotChat(t *testing.T) {
	t.Parallel()
	isBot := func(tr *gate.Turn) { tr.Event.Sender.IsBot = true }
	botDirect := func(tr *gate.Turn) { isBot(tr); direct(tr) }
	mode := func(m gate.BotChatMode) func(c *gate.Config) { return func(c *gate.Config) { c.Policy.BotChat = m } }
	runGate(t, gate.NameBotChat, []gateCase{
		{name: "human, off", cfg: mode(gate.BotChatOff)},
		{name: "bot, default mentions, unprompted", turn: isBot, want: gate.IgnoredBotChatSuppressed, reason: "did not address"},
		{name: "bot, default mentions, direct", turn: botDirect},
		{name: "bot, mentions, unprompted", cfg: mode(gate.BotChatMentions), turn: isBot, want: gate.IgnoredBotChatSuppressed},
		{name: "bot, off, direct", cfg: mode(gate.BotChatOff), turn: botDirect, want: gate.IgnoredBotChatSuppressed, reason: "bot chat is off"},
		{name: "bot, on, unprompted", cfg: mode(gate.BotChatOn), turn: isBot},
		{name: "group override on", cfg: func(c *gate.Config) {
			c.Policy.BotChat = gate.BotChatOff
			c.Groups = map[string]gate.GroupPolicy{"g1": {BotChat: gate.BotChatOn}}
		}, turn: isBot},
		{name: "group override off", cfg: func(c *gate.Config) {
			c.Groups = map[string]gate.GroupPolicy{"g1": {BotChat: gate.BotChatOff}}
		}, turn: botDirect, want: gate.IgnoredBotChatSuppressed},
	})
}

func TestGateVideo(t *testing.T) {
	t.Parallel()
	video := channel.Segment{Type: channel.SegVideo, Media: &channel.Media{URL: "v"}}
	sticker := channel.Segment{Type: channel.SegSticker, Media: &channel.Media{URL: "s"}}
	segs := func(s ...channel.Segment) func(tr *gate.Turn) {
		return func(tr *gate.Turn) { tr.Event.Segments = s }
	}
	runGate(t, gate.NameVideo, []gateCase{
		{name: "text"},
		{name: "video only", turn: segs(video), want: gate.IgnoredVideo, reason: "only a video"},
		{name: "video only, direct", turn: func(tr *gate.Turn) { segs(video)(tr); direct(tr) }, want: gate.IgnoredVideo},
		{name: "video with blank text", turn: segs(channel.Text(" \n\u3000"), video), want: gate.IgnoredVideo},
		{name: "video with a mention", turn: segs(channel.Mention("bot"), video), want: gate.IgnoredVideo},
		{name: "video and text", turn: segs(video, channel.Text("look!"))},
		{name: "video and image", turn: segs(video, channel.Image(channel.Media{URL: "i"}))},
		{name: "image only", turn: segs(channel.Image(channel.Media{URL: "i"}))},
		{name: "empty message", turn: segs()},
		{name: "video and voice", turn: segs(video, channel.Segment{Type: channel.SegVoice, Media: &channel.Media{URL: "a"}})},
		{name: "sticker only", turn: segs(sticker), want: gate.IgnoredStickerOnly, reason: "only a sticker"},
		{name: "stickers and an emoji", turn: segs(sticker, channel.Segment{Type: channel.SegFace, FaceID: "1"}, channel.Text(" "), sticker),
			want: gate.IgnoredStickerOnly},
		{name: "sticker only, direct", turn: func(tr *gate.Turn) { segs(sticker)(tr); direct(tr) }},
		{name: "sticker and text", turn: segs(sticker, channel.Text("haha"))},
		{name: "sticker and image", turn: segs(sticker, channel.Image(channel.Media{URL: "i"}))},
		{name: "sticker and video", turn: segs(sticker, video), want: gate.IgnoredVideo},
	})
}

func TestGateReplyGate(t *testing.T) {
	t.Parallel()
	users := func(blocked, allowed, exempt []string) func(c *gate.Config) {
		return func(c *gate.Config) {
			c.Policy.BlockedUsers, c.Policy.AllowedUsers, c.Policy.ExemptUsers = blocked, allowed, exempt
		}
	}
	// t0 is 14:00 UTC.
	hours := func(h, zone string) func(c *gate.Config) {
		return func(c *gate.Config) { c.Policy.ActiveHours, c.Policy.Zone = h, zone }
	}
	owner := func(tr *gate.Turn) { tr.Owner = true }
	runGate(t, gate.NameReplyGate, []gateCase{
		{name: "default passes"},
		{name: "blocked", cfg: users([]string{"u1"}, nil, nil), want: gate.IgnoredBlockedUser, reason: "u1 is blocked"},
		{name: "blocked, direct", cfg: users([]string{"u1"}, nil, nil), turn: direct, want: gate.IgnoredBlockedUser},
		{name: "owner bypasses the block", cfg: users([]string{"u1"}, nil, nil), turn: owner},
		{name: "blocked beats exempt", cfg: users([]string{"u1"}, nil, []string{"u1"}), want: gate.IgnoredBlockedUser},
		{name: "blocked in the group", cfg: func(c *gate.Config) {
			c.Groups = map[string]gate.GroupPolicy{"g1": {BlockedUsers: []string{"u1"}}}
		}, want: gate.IgnoredBlockedUser},
		{name: "allowlist, listed", cfg: users(nil, []string{"u1"}, nil)},
		{name: "allowlist, not listed", cfg: users(nil, []string{"u2"}, nil), want: gate.IgnoredNotAllowlisted, reason: "u1 is not on the allowlist"},
		{name: "allowlist, owner", cfg: users(nil, []string{"u2"}, nil), turn: owner},
		{name: "group allowlist adds to the bot's", cfg: func(c *gate.Config) {
			c.Policy.AllowedUsers = []string{"u2"}
			c.Groups = map[string]gate.GroupPolicy{"g1": {AllowedUsers: []string{"u1"}}}
		}},
		{name: "inside active hours", cfg: hours("09:00-18:00", "")},
		{name: "outside active hours", cfg: hours("09:00-12:00", ""), want: gate.IgnoredQuietHours, reason: "outside the active hours 09:00-12:00 (UTC)"},
		{name: "overnight window, afternoon", cfg: hours("22:00-06:00", ""), want: gate.IgnoredQuietHours},
		{name: "window in another zone", cfg: hours("09:00-17:00", "Etc/GMT+8"), want: gate.IgnoredQuietHours}, // 06:00 there
		{name: "window in another zone, inside", cfg: hours("05:00-07:00", "Etc/GMT+8")},
		{name: "exempt skips the hours", cfg: func(c *gate.Config) { hours("09:00-12:00", "")(c); users(nil, nil, []string{"u1"})(c) }},
		{name: "owner skips the hours", cfg: hours("09:00-12:00", ""), turn: owner},
		{name: "group hours replace the bot's", cfg: func(c *gate.Config) {
			hours("09:00-12:00", "")(c)
			c.Groups = map[string]gate.GroupPolicy{"g1": {ActiveHours: "00:00-24:00"}}
		}},
		{name: "group zone", cfg: func(c *gate.Config) {
			hours("13:00-15:00", "")(c)
			c.Groups = map[string]gate.GroupPolicy{"g1": {Zone: "Etc/GMT-2"}} // 16:00 there
		}, want: gate.IgnoredQuietHours},
		{name: "quiet reply for a direct message", cfg: func(c *gate.Config) {
			hours("09:00-12:00", "")(c)
			c.Policy.QuietReply = "I'm asleep, back at 9."
		}, turn: direct, want: gate.IgnoredQuietHours, reply: "I'm asleep, back at 9."},
		{name: "no quiet reply for an unprompted message", cfg: func(c *gate.Config) {
			hours("09:00-12:00", "")(c)
			c.Policy.QuietReply = "zzz"
		}, want: gate.IgnoredQuietHours},
		{name: "quiet reply already sent this hour", cfg: func(c *gate.Config) {
			hours("09:00-12:00", "")(c)
			c.Policy.QuietReply = "zzz"
		}, setup: setFlag(gate.FlagQuietReply, "", t0.Add(time.Minute), ""), turn: direct, want: gate.IgnoredQuietHours},
		{name: "quiet reply flag unreadable", cfg: func(c *gate.Config) {
			hours("09:00-12:00", "")(c)
			c.Policy.QuietReply = "zzz"
		}, setup: broken, turn: direct, want: gate.IgnoredQuietHours},
		{name: "group quiet reply", cfg: func(c *gate.Config) {
			hours("09:00-12:00", "")(c)
			c.Policy.QuietReply = "bot text"
			c.Groups = map[string]gate.GroupPolicy{"g1": {QuietReply: "group text"}}
		}, turn: direct, want: gate.IgnoredQuietHours, reply: "group text"},
		{name: "level below minimum", cfg: minLevel(10, ""), turn: level(5), want: gate.IgnoredMemberLevel, reason: "member level 5 is below the group minimum 10"},
		{name: "level at minimum", cfg: minLevel(10, ""), turn: level(10)},
		{name: "level below minimum, direct", cfg: minLevel(10, ""), turn: func(tr *gate.Turn) { level(1)(tr); direct(tr) }, want: gate.IgnoredMemberLevel},
		{name: "admin passes", cfg: minLevel(10, ""), turn: func(tr *gate.Turn) { level(1)(tr); tr.Event.Sender.Role = channel.RoleAdmin }},
		{name: "group owner passes", cfg: minLevel(10, ""), turn: func(tr *gate.Turn) { level(1)(tr); tr.Event.Sender.Role = channel.RoleOwner }},
		{name: "exempt skips the level", cfg: func(c *gate.Config) { minLevel(10, "")(c); users(nil, nil, []string{"u1"})(c) }, turn: level(1)},
		{name: "unknown level, default allow", cfg: minLevel(10, "")},
		{name: "unknown level, deny", cfg: minLevel(10, gate.LevelDeny), want: gate.IgnoredMemberLevel, reason: "unknown"},
		{name: "unknown level, admin, deny", cfg: minLevel(10, gate.LevelDeny), turn: func(tr *gate.Turn) { tr.Event.Sender.Role = channel.RoleAdmin }},
		{name: "level from lookup", cfg: minLevel(10, gate.LevelDeny), turn: lookup(channel.Member{Level: 3, LevelKnown: true}, nil),
			want: gate.IgnoredMemberLevel, reason: "member level 3"},
		{name: "lookup finds enough", cfg: minLevel(10, gate.LevelDeny), turn: lookup(channel.Member{Level: 30, LevelKnown: true}, nil)},
		{name: "lookup finds an admin", cfg: minLevel(10, gate.LevelDeny), turn: func(tr *gate.Turn) {
			tr.Event.Sender.Role = ""
			lookup(channel.Member{Role: channel.RoleAdmin}, nil)(tr)
		}},
		{name: "lookup without level, allow", cfg: minLevel(10, ""), turn: lookup(channel.Member{}, nil)},
		{name: "lookup fails, allow", cfg: minLevel(10, ""), turn: lookup(channel.Member{}, errBroken)},
		{name: "lookup fails, deny", cfg: minLevel(10, gate.LevelDeny), turn: lookup(channel.Member{}, errBroken), want: gate.IgnoredMemberLevel},
		{name: "no level gate in private chats", cfg: minLevel(10, gate.LevelDeny), turn: func(tr *gate.Turn) { *tr = *privateTurn(); level(1)(tr) }},
		{name: "group minimum", cfg: func(c *gate.Config) {
			c.Groups = map[string]gate.GroupPolicy{"g1": {MinMemberLevel: 20, LevelUnknown: gate.LevelDeny}}
		}, turn: level(15), want: gate.IgnoredMemberLevel},
		{name: "group turns the bot minimum off", cfg: func(c *gate.Config) {
			minLevel(10, gate.LevelDeny)(c)
			c.Groups = map[string]gate.GroupPolicy{"g1": {MinMemberLevel: -1}}
		}, turn: level(1)},
		{name: "group allows unknown", cfg: func(c *gate.Config) {
			minLevel(10, gate.LevelDeny)(c)
			c.Groups = map[string]gate.GroupPolicy{"g1": {LevelUnknown: gate.LevelAllow}}
		}},
		{name: "hours before level", cfg: func(c *gate.Config) { minLevel(10, "")(c); hours("09:00-12:00", "")(c) }, turn: level(1),
			want: gate.IgnoredQuietHours},
	})
}

func minLevel(n int, p gate.LevelPolicy) func(c *gate.Config) {
	return func(c *gate.Config) { c.Policy.MinMemberLevel, c.Policy.LevelUnknown = n, p }
}

func level(n int) func(tr *gate.Turn) {
	return func(tr *gate.Turn) { tr.Event.Sender.Level, tr.Event.Sender.LevelKnown = n, true }
}

// members is a hand-written channel.MemberLookup fake.
type members struct {
	m     channel.Member
	err   error
	calls atomic.Int32
}

func (f *members) LookupMember(_ context.Context, _ channel.Chat, userID string) (channel.Member, error) {
	f.calls.Add(1)
	m := f.m
	m.UserID = userID
	return m, f.err
}

func lookup(m channel.Member, err error) func(tr *gate.Turn) {
	return func(tr *gate.Turn) { tr.Members = &members{m: m, err: err} }
}

func TestQuietReplyOncePerInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gate.Config) {
		c.Policy.ActiveHours, c.Policy.QuietReply = "09:00-12:00", "zzz"
	})
	g := pick(t, e.rules.Chain(), gate.NameReplyGate)
	at := func(d time.Duration, session string) gate.Verdict {
		tr := groupTurn()
		direct(tr)
		tr.Now = t0.Add(d)
		if session != "" {
			tr.SessionKey = session
		}
		return g.Check(t.Context(), tr)
	}
	require.Equal(t, "zzz", at(0, "").Reply)
	require.Empty(t, at(time.Minute, "").Reply)
	require.Equal(t, "zzz", at(time.Minute, "other-session").Reply, "per chat")
	require.Empty(t, at(59*time.Minute, "").Reply)
	v := at(time.Hour, "")
	require.Equal(t, "zzz", v.Reply, "again after an hour")
	require.Equal(t, gate.IgnoredQuietHours, v.Code)

	e2 := newEnv(t, func(c *gate.Config) {
		c.Policy.ActiveHours, c.Policy.QuietReply, c.Policy.QuietReplyInterval = "09:00-12:00", "zzz", 10*time.Minute
	})
	g = pick(t, e2.rules.Chain(), gate.NameReplyGate)
	require.Equal(t, "zzz", at(0, "").Reply)
	require.Equal(t, "zzz", at(10*time.Minute, "").Reply, "configured interval")
}

func TestMemberLevelCache(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, func(c *gate.Config) {
		c.Clock = clk
		c.Policy.MinMemberLevel, c.Policy.LevelUnknown = 10, gate.LevelDeny
	})
	g := pick(t, e.rules.Chain(), gate.NameReplyGate)
	look := &members{m: channel.Member{Level: 3, LevelKnown: true}}
	check := func(mod func(tr *gate.Turn)) gate.Verdict {
		tr := groupTurn()
		tr.Members = look
		if mod != nil {
			mod(tr)
		}
		return g.Check(t.Context(), tr)
	}
	require.Equal(t, gate.IgnoredMemberLevel, check(nil).Code)
	require.EqualValues(t, 1, look.calls.Load())

	// Within the TTL the cached level is used, even if the member levelled up.
	look.m.Level = 50
	clk.Advance(9 * time.Minute)
	require.Equal(t, gate.IgnoredMemberLevel, check(nil).Code)
	require.EqualValues(t, 1, look.calls.Load())

	// A level on the event wins without a lookup.
	require.Equal(t, gate.Pass, check(level(12)))
	require.EqualValues(t, 1, look.calls.Load())

	// Another member, another chat or another bot is looked up separately.
	require.Equal(t, gate.Pass, check(func(tr *gate.Turn) { tr.Event.Sender.ID = "u2" }))
	require.Equal(t, gate.Pass, check(func(tr *gate.Turn) { tr.Event.Chat.ID = "g9" }))
	require.EqualValues(t, 3, look.calls.Load())

	// After the TTL the lookup runs again.
	clk.Advance(time.Minute)
	require.Equal(t, gate.Pass, check(nil))
	require.EqualValues(t, 4, look.calls.Load())

	// Failed lookups are not cached.
	fail := &members{err: errBroken}
	tr := func(tr *gate.Turn) { tr.Event.Sender.ID = "u7"; tr.Members = fail }
	require.Equal(t, gate.IgnoredMemberLevel, check(tr).Code)
	require.Equal(t, gate.IgnoredMemberLevel, check(tr).Code)
	require.EqualValues(t, 2, fail.calls.Load())

	// Admins on the event skip the lookup.
	require.Equal(t, gate.Pass, check(func(tr *gate.Turn) {
		tr.Event.Sender.ID = "u8"
		tr.Event.Sender.Role = channel.RoleAdmin
		tr.Members = fail
	}))
	require.EqualValues(t, 2, fail.calls.Load())
}

func TestMemberLevelCacheTTL(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, func(c *gate.Config) {
		c.Clock = clk
		c.Policy.MinMemberLevel, c.Policy.MemberCacheTTL = 10, time.Minute
	})
	g := pick(t, e.rules.Chain(), gate.NameReplyGate)
	look := &members{m: channel.Member{Level: 3, LevelKnown: true}}
	tr := groupTurn()
	tr.Members = look
	g.Check(t.Context(), tr)
	clk.Advance(59 * time.Second)
	g.Check(t.Context(), tr)
	require.EqualValues(t, 1, look.calls.Load())
	clk.Advance(time.Second)
	g.Check(t.Context(), tr)
	require.EqualValues(t, 2, look.calls.Load())
}

func TestGateProactiveSwitch(t *testing.T) {
	t.Parallel()
	bothOff := func(c *gate.Config) {
		c.Policy.Proactive = gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatOff}
	}
	runGate(t, gate.NameProactiveSwitch, []gateCase{
		{name: "default on"},
		{name: "only answer questions", cfg: func(c *gate.Config) { c.Policy.Proactive.ChatIn = gate.ChatOff }},
		{name: "only chat in", cfg: func(c *gate.Config) { c.Policy.Proactive.AnswerQuestions = gate.ToggleOff }},
		{name: "both off", cfg: bothOff, want: gate.IgnoredProactiveOff, reason: "both proactive switches are off"},
		{name: "both off, direct", cfg: bothOff, turn: direct},
		{name: "both off, owner", cfg: bothOff, turn: func(tr *gate.Turn) { tr.Owner = true }, want: gate.IgnoredProactiveOff},
		{name: "no router", cfg: func(c *gate.Config) { c.NoRouter = true }, want: gate.IgnoredProactiveOff, reason: "no router"},
		{name: "no router, direct", cfg: func(c *gate.Config) { c.NoRouter = true }, turn: direct},
		{name: "group turns chat-in on", cfg: func(c *gate.Config) {
			bothOff(c)
			c.Groups = map[string]gate.GroupPolicy{"g1": {Proactive: gate.Proactive{ChatIn: gate.ChatHigh}}}
		}},
		{name: "group turns both off", cfg: func(c *gate.Config) {
			c.Groups = map[string]gate.GroupPolicy{"g1": {Proactive: gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatOff}}}
		}, want: gate.IgnoredProactiveOff},
		{name: "/send off beats the policy", setup: sendMode(gate.SendOff), want: gate.IgnoredProactiveOff, reason: "/send off"},
		{name: "/send off, direct", setup: sendMode(gate.SendOff), turn: direct},
		{name: "/send on beats both off", cfg: bothOff, setup: sendMode(gate.SendOn)},
		{name: "/send on, no router", cfg: func(c *gate.Config) { c.NoRouter = true }, setup: sendMode(gate.SendOn), want: gate.IgnoredProactiveOff, reason: "no router"},
		{name: "/send inherit", cfg: bothOff, setup: func(t *testing.T, e *env) {
			sendMode(gate.SendOn)(t, e)
			sendMode(gate.SendInherit)(t, e)
		}, want: gate.IgnoredProactiveOff, reason: "both proactive switches are off"},
		{name: "flags broken", setup: broken, err: true},
	})
}

func sendMode(mode string) func(t *testing.T, e *env) {
	return func(t *testing.T, e *env) {
		require.NoError(t, gate.SetSendMode(t.Context(), e.flags, groupTurn().SessionKey, mode))
	}
}

func TestSendModeAndProactiveIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gate.Config) {
		c.Policy.Proactive = gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatOff}
	})
	ev := groupTurn().Event
	ev.SessionKey = groupTurn().SessionKey
	require.Error(t, gate.SetSendMode(t.Context(), e.flags, ev.SessionKey, "maybe"))
	mode, err := gate.SendMode(t.Context(), e.flags, ev.SessionKey, t0)
	require.NoError(t, err)
	require.Equal(t, gate.SendInherit, mode)
	require.False(t, e.rules.ProactiveIn(&ev).On())
	require.NoError(t, gate.SetSendMode(t.Context(), e.flags, ev.SessionKey, gate.SendOn))
	require.True(t, e.rules.ProactiveIn(&ev).On())
	require.Equal(t, gate.ChatOff, e.rules.ProactiveIn(&ev).ChatIn, "chat-in stays as the policy says")
	require.NoError(t, gate.SetSendMode(t.Context(), e.flags, ev.SessionKey, gate.SendOff))
	require.False(t, e.rules.ProactiveIn(&ev).On())
}

func TestGateStopWindow(t *testing.T) {
	t.Parallel()
	open := func(at time.Time, window time.Duration) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			require.NoError(t, gate.OpenStopWindow(t.Context(), e.flags, groupTurn().SessionKey, at, window))
		}
	}
	runGate(t, gate.NameStopWindow, []gateCase{
		{name: "no window"},
		{name: "window open", setup: open(t0.Add(-time.Minute), 0), want: gate.IgnoredStopRequested, reason: "until 2026-03-02 14:09 UTC"},
		{name: "window open, direct", setup: open(t0.Add(-time.Minute), 0), turn: direct},
		{name: "window open, owner", setup: open(t0.Add(-time.Minute), 0), turn: func(tr *gate.Turn) { tr.Owner = true }, want: gate.IgnoredStopRequested},
		{name: "default window is 10 minutes", setup: open(t0.Add(-10*time.Minute), 0)},
		{name: "just inside the default window", setup: open(t0.Add(-10*time.Minute+time.Millisecond), 0), want: gate.IgnoredStopRequested},
		{name: "custom window", setup: open(t0.Add(-10*time.Minute), time.Hour), want: gate.IgnoredStopRequested},
		{name: "rules use the configured window", cfg: func(c *gate.Config) { c.Policy.StopWindow = 2 * time.Minute },
			setup: func(t *testing.T, e *env) {
				require.NoError(t, e.rules.OpenStopWindow(t.Context(), groupTurn().SessionKey, t0.Add(-time.Minute)))
			}, want: gate.IgnoredStopRequested, reason: "14:01"},
		{name: "rules default window", setup: func(t *testing.T, e *env) {
			require.NoError(t, e.rules.OpenStopWindow(t.Context(), groupTurn().SessionKey, t0.Add(-time.Minute)))
		}, want: gate.IgnoredStopRequested, reason: "14:09"},
		{name: "flags broken", setup: broken, err: true},
		{name: "flags broken, direct", setup: broken, turn: direct},
	})
}

// sampledID returns a message id of groupTurn's session that the rate
// samples out (in=false) or in (in=true).
func sampledID(t *testing.T, rate float64, in bool) string {
	t.Helper()
	s := groupTurn().SessionKey
	for i := range 1000 {
		id := "m" + strconv.Itoa(i)
		if (gate.SampleValue(s, id) < rate) == in {
			return id
		}
	}
	t.Fatal("no id found")
	return ""
}

func TestGateSampling(t *testing.T) {
	t.Parallel()
	rate := func(r float64) func(c *gate.Config) { return func(c *gate.Config) { c.Policy.SamplingRate = r } }
	id := func(id string) func(tr *gate.Turn) { return func(tr *gate.Turn) { tr.Event.MessageID = id } }
	out, in := sampledID(t, 0.5, false), sampledID(t, 0.5, true)
	runGate(t, gate.NameSampling, []gateCase{
		{name: "default rate routes all", turn: id(out)},
		{name: "rate 1 routes all", cfg: rate(1), turn: id(out)},
		{name: "sampled out", cfg: rate(0.5), turn: id(out), want: gate.IgnoredSampledOut, reason: "rate 0.500"},
		{name: "sampled in", cfg: rate(0.5), turn: id(in)},
		{name: "owner exempt", cfg: rate(0.5), turn: func(tr *gate.Turn) { id(out)(tr); tr.Owner = true }},
		{name: "direct exempt", cfg: rate(0.5), turn: func(tr *gate.Turn) { id(out)(tr); direct(tr) }},
		{name: "group rate", cfg: func(c *gate.Config) { c.Groups = map[string]gate.GroupPolicy{"g1": {SamplingRate: 0.5}} },
			turn: id(out), want: gate.IgnoredSampledOut},
		{name: "group rate back to all", cfg: func(c *gate.Config) {
			c.Policy.SamplingRate = 0.5
			c.Groups = map[string]gate.GroupPolicy{"g1": {SamplingRate: 1}}
		}, turn: id(out)},
	})
}

func TestSampleValue(t *testing.T) {
	t.Parallel()
	require.InDelta(t, gate.SampleValue("s", "m1"), gate.SampleValue("s", "m1"), 0, "deterministic")
	require.NotEqual(t, gate.SampleValue("s", "m1"), gate.SampleValue("s", "m2"))
	require.NotEqual(t, gate.SampleValue("ab", "c"), gate.SampleValue("a", "bc"), "the separator keeps the parts apart")
	// The values spread evenly, also for sequential ids: about 30 % below
	// 0.3, in every block of consecutive ids.
	n, below := 20000, 0
	for i := range n {
		v := gate.SampleValue("default:onebot:bot:group:g1", strconv.Itoa(100000+i))
		require.GreaterOrEqual(t, v, 0.0)
		require.Less(t, v, 1.0)
		if v < 0.3 {
			below++
		}
	}
	require.InDelta(t, 0.3, float64(below)/float64(n), 0.02)
	for block := 0; block < 1000; block += 100 {
		below = 0
		for i := range 100 {
			if gate.SampleValue("s", strconv.Itoa(5000+block+i)) < 0.5 {
				below++
			}
		}
		require.InDelta(t, 50, below, 20, "block %d", block)
	}
}

func TestChainStopsAtFailedGate(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	failing := gate.New("failing", func(context.Context, *gate.Turn) gate.Verdict { return gate.Failed(errBroken) })
	v := gate.Chain{r.pass("a"), failing, r.pass("b")}.Check(t.Context(), &gate.Turn{})
	require.False(t, v.Stop)
	require.ErrorIs(t, v.Err, errBroken)
	require.Equal(t, "failing", v.Gate)
	require.Equal(t, []string{"a"}, r.calls)
}
