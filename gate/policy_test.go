package gate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/gate/gatetest"
)

func TestEnumsValid(t *testing.T) {
	t.Parallel()
	for _, v := range []gate.Toggle{"", gate.ToggleOn, gate.ToggleOff} {
		require.True(t, v.Valid(), "%q", v)
	}
	require.False(t, gate.Toggle("yes").Valid())
	for _, v := range []gate.BotChatMode{"", gate.BotChatOff, gate.BotChatMentions, gate.BotChatOn} {
		require.True(t, v.Valid(), "%q", v)
	}
	require.False(t, gate.BotChatMode("always").Valid())
	for _, v := range []gate.LevelPolicy{"", gate.LevelAllow, gate.LevelDeny} {
		require.True(t, v.Valid(), "%q", v)
	}
	require.False(t, gate.LevelPolicy("block").Valid())
	for _, v := range []gate.GroupAdmission{"", gate.GroupsOpen, gate.GroupsAllowlist} {
		require.True(t, v.Valid(), "%q", v)
	}
	require.False(t, gate.GroupAdmission("owner_only").Valid())
	for _, v := range []gate.ChatLevel{"", gate.ChatOff, gate.ChatLow, gate.ChatMedium, gate.ChatHigh, gate.ChatNoLimit} {
		require.True(t, v.Valid(), "%q", v)
	}
	require.False(t, gate.ChatLevel("max").Valid())
}

func TestToggleOr(t *testing.T) {
	t.Parallel()
	require.True(t, gate.Toggle("").Or(true))
	require.False(t, gate.Toggle("").Or(false))
	require.True(t, gate.ToggleOn.Or(false))
	require.False(t, gate.ToggleOff.Or(true))
}

func TestChatLevelThreshold(t *testing.T) {
	t.Parallel()
	tests := []struct {
		level gate.ChatLevel
		want  float64
	}{
		{"", 0.95}, {gate.ChatLow, 0.95}, {gate.ChatMedium, 0.88}, {gate.ChatHigh, 0.80}, {gate.ChatNoLimit, 0.70}, {gate.ChatOff, 0},
	}
	for _, tt := range tests {
		require.InDelta(t, tt.want, tt.level.Threshold(), 1e-9, "%q", tt.level)
	}
}

func TestProactiveResolved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   gate.Proactive
		want gate.Proactive
		on   bool
	}{
		{name: "zero", in: gate.Proactive{},
			want: gate.Proactive{AnswerQuestions: gate.ToggleOn, ChatIn: gate.ChatLow, ChatThreshold: 0.95, ChatCooldown: 30 * time.Second}, on: true},
		{name: "answer off, chat low", in: gate.Proactive{AnswerQuestions: gate.ToggleOff},
			want: gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatLow, ChatThreshold: 0.95, ChatCooldown: 30 * time.Second}, on: true},
		{name: "both off", in: gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatOff},
			want: gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatOff, ChatThreshold: 0, ChatCooldown: 30 * time.Second}, on: false},
		{name: "threshold and cooldown overrides", in: gate.Proactive{ChatIn: gate.ChatHigh, ChatThreshold: 0.5, ChatCooldown: time.Minute, Criteria: "x"},
			want: gate.Proactive{AnswerQuestions: gate.ToggleOn, ChatIn: gate.ChatHigh, ChatThreshold: 0.5, ChatCooldown: time.Minute, Criteria: "x"}, on: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.in.Resolved())
			require.Equal(t, tt.on, tt.in.On())
			require.InDelta(t, tt.want.ChatThreshold, tt.in.Threshold(), 1e-9)
		})
	}
}

func TestCompileRejectsBadConfig(t *testing.T) {
	t.Parallel()
	flags := gatetest.NewFlags()
	tests := []struct {
		name string
		cfg  gate.Config
		err  string
	}{
		{name: "no flags", cfg: gate.Config{}, err: "Flags is required"},
		{name: "group admission", cfg: gate.Config{Policy: gate.Policy{GroupAdmission: "closed"}}, err: `GroupAdmission "closed"`},
		{name: "level policy", cfg: gate.Config{Policy: gate.Policy{LevelUnknown: "maybe"}}, err: `LevelUnknown "maybe"`},
		{name: "bot chat", cfg: gate.Config{Policy: gate.Policy{BotChat: "sometimes"}}, err: `BotChat "sometimes"`},
		{name: "sampling above 1", cfg: gate.Config{Policy: gate.Policy{SamplingRate: 1.5}}, err: "SamplingRate 1.5"},
		{name: "sampling negative", cfg: gate.Config{Policy: gate.Policy{SamplingRate: -0.1}}, err: "SamplingRate -0.1"},
		{name: "negative level", cfg: gate.Config{Policy: gate.Policy{MinMemberLevel: -1}}, err: "MinMemberLevel"},
		{name: "negative quota", cfg: gate.Config{Policy: gate.Policy{Quota: gate.Quotas{User: -1}}}, err: "negative quota"},
		{name: "negative duration", cfg: gate.Config{Policy: gate.Policy{StopWindow: -time.Second}}, err: "negative duration"},
		{name: "bad hours", cfg: gate.Config{Policy: gate.Policy{ActiveHours: "9am-5pm"}}, err: `invalid active hours "9am-5pm"`},
		{name: "bad zone", cfg: gate.Config{Policy: gate.Policy{Zone: "Mars/Olympus"}}, err: `zone "Mars/Olympus"`},
		{name: "answer questions", cfg: gate.Config{Policy: gate.Policy{Proactive: gate.Proactive{AnswerQuestions: "yes"}}}, err: `AnswerQuestions "yes"`},
		{name: "chat level", cfg: gate.Config{Policy: gate.Policy{Proactive: gate.Proactive{ChatIn: "max"}}}, err: `ChatIn level "max"`},
		{name: "chat threshold", cfg: gate.Config{Policy: gate.Policy{Proactive: gate.Proactive{ChatThreshold: 2}}}, err: "ChatThreshold 2"},
		{name: "chat cooldown", cfg: gate.Config{Policy: gate.Policy{Proactive: gate.Proactive{ChatCooldown: -1}}}, err: "ChatCooldown"},
		{name: "quota without port", cfg: gate.Config{Policy: gate.Policy{Quota: gate.Quotas{Bot: 10}}}, err: "Config.Quota is nil"},
		{name: "group quota without port", cfg: gate.Config{Groups: map[string]gate.GroupPolicy{"g1": {Quota: gate.Quotas{User: 3}}}}, err: "Config.Quota is nil"},
		{name: "group hours", cfg: gate.Config{Groups: map[string]gate.GroupPolicy{"g1": {ActiveHours: "25:00-01:00"}}}, err: `group "g1": gate: invalid active hours`},
		{name: "group zone", cfg: gate.Config{Groups: map[string]gate.GroupPolicy{"g1": {Zone: "Nowhere/City"}}}, err: `group "g1": zone`},
		{name: "group level policy", cfg: gate.Config{Groups: map[string]gate.GroupPolicy{"g1": {LevelUnknown: "x"}}}, err: `group "g1": unknown LevelUnknown`},
		{name: "group bot chat", cfg: gate.Config{Groups: map[string]gate.GroupPolicy{"g1": {BotChat: "x"}}}, err: `group "g1": unknown BotChat`},
		{name: "group sampling", cfg: gate.Config{Groups: map[string]gate.GroupPolicy{"g1": {SamplingRate: 3}}}, err: `group "g1": SamplingRate 3`},
		{name: "group proactive", cfg: gate.Config{Groups: map[string]gate.GroupPolicy{"g1": {Proactive: gate.Proactive{ChatIn: "loud"}}}}, err: `group "g1": unknown ChatIn`},
		{name: "empty group id", cfg: gate.Config{Groups: map[string]gate.GroupPolicy{"onebot:": {}}}, err: "has no group id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.cfg
			if tt.name != "no flags" {
				cfg.Flags = flags
			}
			_, err := gate.Compile(cfg)
			require.ErrorIs(t, err, gate.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.err)
			_, err = gate.Default(cfg)
			require.ErrorIs(t, err, gate.ErrInvalidConfig)
		})
	}
}

func TestCompileZeroConfig(t *testing.T) {
	t.Parallel()
	r, err := gate.Compile(gate.Config{Flags: gatetest.NewFlags()})
	require.NoError(t, err)
	require.Len(t, r.Chain(), 12)
	c, err := gate.Default(gate.Config{Flags: gatetest.NewFlags()})
	require.NoError(t, err)
	require.Equal(t, []string{
		gate.NameUnavailableGroup, gate.NameBotEnabled, gate.NameGroupEnabled, gate.NameBotMuted,
		gate.NameModelQuota, gate.NameResponseSuppression, gate.NameBotChat, gate.NameVideo,
		gate.NameReplyGate, gate.NameProactiveSwitch, gate.NameStopWindow, gate.NameSampling,
	}, names(c))
}

func TestRulesProactiveByGroup(t *testing.T) {
	t.Parallel()
	r, err := gate.Compile(gate.Config{
		Flags:  gatetest.NewFlags(),
		Policy: gate.Policy{Proactive: gate.Proactive{ChatIn: gate.ChatMedium, Criteria: "be kind"}},
		Groups: map[string]gate.GroupPolicy{
			"g1":          {Proactive: gate.Proactive{ChatIn: gate.ChatHigh, ChatCooldown: time.Minute, Criteria: "games only"}},
			"telegram:g1": {Proactive: gate.Proactive{AnswerQuestions: gate.ToggleOff}},
			"g2":          {Proactive: gate.Proactive{ChatThreshold: 0.6}},
		},
	})
	require.NoError(t, err)
	ev := func(platform, chat string, kind channel.ChatKind) *channel.Event {
		return &channel.Event{Platform: platform, Chat: channel.Chat{Kind: kind, ID: chat}}
	}
	p := r.Proactive(ev("onebot", "g1", channel.Group))
	require.Equal(t, gate.Proactive{AnswerQuestions: gate.ToggleOn, ChatIn: gate.ChatHigh, ChatThreshold: 0.80,
		ChatCooldown: time.Minute, Criteria: "be kind\ngames only"}, p)

	p = r.Proactive(ev("telegram", "g1", channel.Group))
	require.Equal(t, gate.ToggleOff, p.AnswerQuestions, "the platform-qualified key wins")
	require.Equal(t, gate.ChatMedium, p.ChatIn, "and does not inherit the plain key's settings")

	p = r.Proactive(ev("onebot", "g2", channel.Group))
	require.InDelta(t, 0.6, p.ChatThreshold, 1e-9)

	p = r.Proactive(ev("onebot", "g3", channel.Group))
	require.Equal(t, gate.ChatMedium, p.ChatIn)
	require.InDelta(t, 0.88, p.ChatThreshold, 1e-9)
	require.Equal(t, "be kind", p.Criteria)

	p = r.Proactive(ev("onebot", "g1", channel.Private))
	require.Equal(t, gate.ChatMedium, p.ChatIn, "private chats use the bot policy even when a group shares the id")
}
