package channel_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

func TestSessionKey(t *testing.T) {
	t.Parallel()
	g := channel.Chat{Kind: channel.Group, ID: "123"}
	require.Equal(t, "work:onebot:10001:group:123", channel.SessionKey("work", "onebot", "10001", g))
	require.Equal(t, "default:onebot:10001:group:123", channel.SessionKey("", "onebot", "10001", g))
	require.Equal(t, channel.DefaultProfile+":telegram:b:private:-100:7",
		channel.SessionKey("", "telegram", "b", channel.Chat{Kind: channel.Private, ID: "-100:7"}))
}

func TestParseSessionKeyRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    channel.SessionParts
	}{
		{name: "group", p: channel.SessionParts{Profile: "default", Platform: "onebot", BotID: "10001", Chat: channel.Chat{Kind: channel.Group, ID: "123"}}},
		{name: "private", p: channel.SessionParts{Profile: "p", Platform: "telegram", BotID: "b", Chat: channel.Chat{Kind: channel.Private, ID: "42"}}},
		{name: "negative id", p: channel.SessionParts{Profile: "p", Platform: "telegram", BotID: "b", Chat: channel.Chat{Kind: channel.Group, ID: "-100123"}}},
		{name: "chat id with a colon", p: channel.SessionParts{Profile: "p", Platform: "telegram", BotID: "b", Chat: channel.Chat{Kind: channel.Group, ID: "chat:55"}}},
		{name: "chat id with many colons", p: channel.SessionParts{Profile: "p", Platform: "matrix", BotID: "b", Chat: channel.Chat{Kind: channel.Group, ID: "!room:example.org:8448:"}}},
		{name: "chat id of colons", p: channel.SessionParts{Profile: "p", Platform: "x", BotID: "b", Chat: channel.Chat{Kind: channel.Private, ID: ":::"}}},
		{name: "unicode", p: channel.SessionParts{Profile: "人格", Platform: "feishu", BotID: "机器人", Chat: channel.Chat{Kind: channel.Group, ID: "群/1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := channel.SessionKey(tt.p.Profile, tt.p.Platform, tt.p.BotID, tt.p.Chat)
			require.Equal(t, key, tt.p.String())
			got, err := channel.ParseSessionKey(key)
			require.NoError(t, err)
			require.Equal(t, tt.p, got)
			require.Equal(t, key, got.String())
		})
	}
}

func TestParseSessionKeyDefaultProfile(t *testing.T) {
	t.Parallel()
	key := channel.SessionKey("", "onebot", "1", channel.Chat{Kind: channel.Group, ID: "2"})
	p, err := channel.ParseSessionKey(key)
	require.NoError(t, err)
	require.Equal(t, channel.DefaultProfile, p.Profile)
	// An empty profile in the parts renders as the default one too.
	require.Equal(t, key, channel.SessionParts{Platform: "onebot", BotID: "1", Chat: p.Chat}.String())
}

func TestParseSessionKeyErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key, msg string
	}{
		{name: "empty", key: "", msg: "has 1 of 5 parts"},
		{name: "no colon", key: "default", msg: "has 1 of 5 parts"},
		{name: "four parts", key: "default:onebot:1:group", msg: "has 4 of 5 parts"},
		{name: "empty profile", key: ":onebot:1:group:2", msg: "empty part"},
		{name: "empty platform", key: "default::1:group:2", msg: "empty part"},
		{name: "empty bot", key: "default:onebot::group:2", msg: "empty part"},
		{name: "empty chat id", key: "default:onebot:1:group:", msg: "empty part"},
		{name: "empty kind", key: "default:onebot:1::2", msg: `chat kind ""`},
		{name: "bad kind", key: "default:onebot:1:channel:2", msg: `chat kind "channel"`},
		{name: "kind is case-sensitive", key: "default:onebot:1:Group:2", msg: `chat kind "Group"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := channel.ParseSessionKey(tt.key)
			require.ErrorIs(t, err, channel.ErrBadSessionKey)
			require.ErrorContains(t, err, tt.msg)
			require.Zero(t, p)
		})
	}
}

func TestEventKeyWithMessageID(t *testing.T) {
	t.Parallel()
	ev := validMessage()
	require.Equal(t, "onebot/10001/group:123/-42", ev.Key())

	// Stable: content, time, sender and source do not change it, so a
	// redelivery (or a backfilled copy) dedupes against the live one.
	again := ev
	again.Segments = []channel.Segment{channel.Text("edited")}
	again.Time = t0.Add(time.Hour)
	again.Source = channel.SourceBackfill
	again.Sender.Name = "Other"
	again.Profile = "work"
	again.SessionKey = "whatever"
	require.Equal(t, ev.Key(), again.Key())

	// Distinct: every identifying field changes it.
	mutations := map[string]func(ev *channel.Event){
		"platform":   func(ev *channel.Event) { ev.Platform = "telegram" },
		"bot":        func(ev *channel.Event) { ev.BotID = "10002" },
		"chat kind":  func(ev *channel.Event) { ev.Chat.Kind = channel.Private },
		"chat id":    func(ev *channel.Event) { ev.Chat.ID = "124" },
		"message id": func(ev *channel.Event) { ev.MessageID = "42" },
	}
	seen := map[string]string{ev.Key(): "base"}
	for name, m := range mutations {
		x := validMessage()
		m(&x)
		k := x.Key()
		prev, dup := seen[k]
		require.False(t, dup, "%s collides with %s: %s", name, prev, k)
		seen[k] = name
		require.False(t, strings.HasPrefix(k, "sha256:"))
	}
}

func noticeEvent() channel.Event {
	return channel.Event{
		Platform: "onebot",
		BotID:    "10001",
		Kind:     channel.KindNotice,
		Chat:     channel.Chat{Kind: channel.Group, ID: "123"},
		Time:     t0,
		Sender:   channel.Sender{ID: "42"},
		Notice:   &channel.Notice{Type: channel.NoticePoke, Operator: "42", UserID: "10001"},
	}
}

func TestEventKeyWithoutMessageID(t *testing.T) {
	t.Parallel()
	ev := noticeEvent()
	k := ev.Key()
	require.True(t, strings.HasPrefix(k, "sha256:"), k)
	require.Len(t, k, len("sha256:")+64)
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, k)

	// Stable: the same notice redelivered (another Raw, Source, profile,
	// sub-millisecond time) maps to the same key.
	again := noticeEvent()
	again.Raw = []byte(`{"post_type":"notice"}`)
	again.Source = channel.SourceBackfill
	again.Profile = "work"
	again.Time = t0.Add(500 * time.Microsecond)
	again.Notice = &channel.Notice{Type: channel.NoticePoke, Operator: "42", UserID: "10001"}
	require.Equal(t, k, again.Key())
	require.Equal(t, k, ev.Key(), "Key is deterministic")

	mutations := map[string]func(ev *channel.Event){
		"platform":      func(ev *channel.Event) { ev.Platform = "telegram" },
		"bot":           func(ev *channel.Event) { ev.BotID = "2" },
		"chat kind":     func(ev *channel.Event) { ev.Chat.Kind = channel.Private },
		"chat id":       func(ev *channel.Event) { ev.Chat.ID = "124" },
		"event kind":    func(ev *channel.Event) { ev.Kind = channel.KindMessage },
		"time (ms)":     func(ev *channel.Event) { ev.Time = t0.Add(time.Millisecond) },
		"sender":        func(ev *channel.Event) { ev.Sender.ID = "43" },
		"notice type":   func(ev *channel.Event) { ev.Notice.Type = channel.NoticeGroupIncrease },
		"operator":      func(ev *channel.Event) { ev.Notice.Operator = "7" },
		"notice user":   func(ev *channel.Event) { ev.Notice.UserID = "8" },
		"target":        func(ev *channel.Event) { ev.Notice.TargetMessageID = "m1" },
		"no notice":     func(ev *channel.Event) { ev.Notice = nil },
		"text":          func(ev *channel.Event) { ev.Segments = []channel.Segment{channel.Text("x")} },
		"field shift 1": func(ev *channel.Event) { ev.Notice.Operator = "4"; ev.Notice.UserID = "210001" },
		"field shift 2": func(ev *channel.Event) { ev.Notice.Operator = "4210001"; ev.Notice.UserID = "" },
	}
	seen := map[string]string{k: "base"}
	for name, m := range mutations {
		x := noticeEvent()
		m(&x)
		got := x.Key()
		require.True(t, strings.HasPrefix(got, "sha256:"))
		prev, dup := seen[got]
		require.False(t, dup, "%s collides with %s", name, prev)
		seen[got] = name
	}
}

func TestKeyEscapesSeparators(t *testing.T) {
	t.Parallel()
	base := channel.Event{Platform: "dingtalk", BotID: "b", Kind: channel.KindMessage, Time: time.Unix(1, 0)}
	a, b := base, base
	a.Chat, a.MessageID = channel.Chat{Kind: channel.Group, ID: "x/y"}, "z"
	b.Chat, b.MessageID = channel.Chat{Kind: channel.Group, ID: "x"}, "y/z"
	require.NotEqual(t, a.Key(), b.Key())
	require.Equal(t, "dingtalk/b/group:x%2Fy/z", a.Key())
}
