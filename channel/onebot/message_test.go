package onebot_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/onebot"
)

func seg(typ string, kv ...string) onebot.Segment {
	d := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		d[kv[i]] = kv[i+1]
	}
	return onebot.Segment{Type: typ, Data: d}
}

func text(s string) onebot.Segment { return onebot.TextSegment(s) }

// The official escape vectors of the OneBot v11 spec (message/string.md,
// array.md, segment.md).
func TestCQOfficialVectors(t *testing.T) {
	t.Parallel()
	t.Run("TextEscape", func(t *testing.T) {
		t.Parallel()
		plain := "- [x] 使用 `&data` 获取地址"
		escaped := "- &#91;x&#93; 使用 `&amp;data` 获取地址"
		require.Equal(t, escaped, onebot.EscapeText(plain))
		require.Equal(t, plain, onebot.Unescape(escaped))
		require.Equal(t, onebot.Message{text(plain)}, onebot.ParseCQ(escaped))
		require.Equal(t, escaped, onebot.RenderCQ(onebot.Message{text(plain)}))
	})
	t.Run("ShareParams", func(t *testing.T) {
		t.Parallel()
		m := onebot.ParseCQ("[CQ:share,title=震惊&#44;小伙睡觉前居然...,url=http://baidu.com/?a=1&amp;b=2]")
		require.Equal(t, onebot.Message{seg("share", "title", "震惊,小伙睡觉前居然...", "url", "http://baidu.com/?a=1&b=2")}, m)
		require.True(t, onebot.EqualMessages(m, onebot.ParseCQ(onebot.RenderCQ(m))))
	})
	t.Run("StringArrayEquivalence", func(t *testing.T) {
		t.Parallel()
		str := "&#91;第一部分&#93;[CQ:image,file=123.jpg]图片之后的部分，表情：[CQ:face,id=123]"
		arr := `[{"type":"text","data":{"text":"[第一部分]"}},{"type":"image","data":{"file":"123.jpg"}},{"type":"text","data":{"text":"图片之后的部分，表情："}},{"type":"face","data":{"id":"123"}}]`
		var fromArr onebot.Message
		require.NoError(t, json.Unmarshal([]byte(arr), &fromArr))
		require.Equal(t, fromArr, onebot.ParseCQ(str))
		require.Equal(t, str, onebot.RenderCQ(fromArr))
		var fromStr onebot.Message
		b, _ := json.Marshal(str)
		require.NoError(t, json.Unmarshal(b, &fromStr))
		require.Equal(t, fromArr, fromStr)
	})
	t.Run("NodeContent", func(t *testing.T) {
		t.Parallel()
		m := onebot.ParseCQ("[CQ:node,user_id=10001000,nickname=某人,content=&#91;CQ:face&#44;id=123&#93;哈喽～]")
		require.Len(t, m, 1)
		require.Equal(t, "[CQ:face,id=123]哈喽～", m[0].Data["content"])
		require.Equal(t, "某人", m[0].Data["nickname"])
		require.Equal(t, "10001000", m[0].Data["user_id"])
		// The content is itself a CQ-code message.
		require.Equal(t, onebot.Message{seg("face", "id", "123"), text("哈喽～")}, onebot.ParseCQ(m[0].Data["content"]))
		require.Equal(t, m, onebot.ParseCQ(onebot.RenderCQ(m)))
	})
	t.Run("FirstEqualsSplits", func(t *testing.T) {
		t.Parallel()
		m := onebot.ParseCQ("[CQ:share,title=标题中有=等号,url=http://baidu.com]")
		require.Equal(t, onebot.Message{seg("share", "title", "标题中有=等号", "url", "http://baidu.com")}, m)
	})
	t.Run("Example", func(t *testing.T) {
		t.Parallel()
		m := onebot.ParseCQ("[CQ:face,id=178]看看我刚拍的照片[CQ:image,file=123.jpg]")
		require.Equal(t, onebot.Message{seg("face", "id", "178"), text("看看我刚拍的照片"), seg("image", "file", "123.jpg")}, m)
		require.Equal(t, "[CQ:face,id=178]看看我刚拍的照片[CQ:image,file=123.jpg]", onebot.RenderCQ(m))
	})
}

func TestCQUnescapeAmpLast(t *testing.T) {
	t.Parallel()
	require.Equal(t, "&#91;", onebot.Unescape("&amp;#91;"))
	require.Equal(t, "&#44;", onebot.Unescape("&amp;#44;"))
	require.Equal(t, "a,b", onebot.Unescape("a&#44;b"))
	require.Equal(t, "&amp;#44;", onebot.EscapeParam("&#44;"))
	require.Equal(t, "&#44;", onebot.Unescape(onebot.EscapeParam("&#44;")))
}

// Malformed CQ codes are kept as literal text; nothing panics.
func TestCQMalformed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want onebot.Message
	}{
		{"", nil},
		{"[CQ:", onebot.Message{text("[CQ:")}},
		{"[CQ:face,id=1", onebot.Message{text("[CQ:face,id=1")}},
		{"[CQ:]", onebot.Message{text("[CQ:]")}},
		{"[CQ:,id=1]", onebot.Message{text("[CQ:,id=1]")}},
		{"[CQ:fa ce,id=1]", onebot.Message{text("[CQ:fa ce,id=1]")}},
		{"[CQ:face,=1]", onebot.Message{text("[CQ:face,=1]")}},
		{"[CQ:face,i d=1]x", onebot.Message{text("[CQ:face,i d=1]x")}},
		{"[[CQ:face,id=1]]", onebot.Message{text("["), seg("face", "id", "1"), text("]")}},
		{"[CQ:[CQ:face]", onebot.Message{text("[CQ:"), seg("face")}},
		{"[CQ:face]", onebot.Message{seg("face")}},
		{"[CQ:face,,id=2,]", onebot.Message{seg("face", "id", "2")}},
		{"[CQ:poke,flag]", onebot.Message{seg("poke", "flag", "")}},
		{"a[CQ:text,text=b&#44;c]d", onebot.Message{text("ab,cd")}},
		{"[CQ:text]", nil},
		{"&#91;CQ:face&#93;", onebot.Message{text("[CQ:face]")}},
	}
	for _, tc := range cases {
		got := onebot.ParseCQ(tc.in)
		require.True(t, onebot.EqualMessages(tc.want, got), "ParseCQ(%q) = %+v, want %+v", tc.in, got, tc.want)
		ok, why := onebot.ValidSegments(got)
		require.True(t, ok, "ParseCQ(%q) is not a valid list: %s", tc.in, why)
		require.True(t, onebot.EqualMessages(got, onebot.ParseCQ(onebot.RenderCQ(got))), "round trip of %q", tc.in)
	}
}

func TestCQRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []onebot.Message{
		{text("hello")},
		{text("[x] & [y], z")},
		{seg("at", "qq", "10001000"), text(" hi")},
		{seg("reply", "id", "-12345"), seg("at", "qq", "all"), text(" 你好 👋🏽")},
		{seg("image", "file", "https://example.com/a.png?x=1&y=[2],3", "type", "flash")},
		{seg("record", "file", "base64://AAAA==")},
		{seg("share", "url", "http://a/?q=,", "title", "a,b&c[d]e")},
		{seg("json", "data", `{"app":"com.tencent","k":[1,2]}`)},
		{seg("face", "id", "178"), seg("face", "id", "179")},
		{seg("video", "file", "", "url", "=")},
		{seg("node", "content", "[CQ:face,id=123]哈喽～", "nickname", "某人", "user_id", "10001000")},
	}
	for _, m := range cases {
		ok, why := onebot.ValidSegments(m)
		require.True(t, ok, why)
		s := onebot.RenderCQ(m)
		require.True(t, onebot.EqualMessages(m, onebot.ParseCQ(s)), "round trip of %+v via %q: %+v", m, s, onebot.ParseCQ(s))
		// The array format round-trips too.
		b, err := json.Marshal(m)
		require.NoError(t, err)
		var back onebot.Message
		require.NoError(t, json.Unmarshal(b, &back))
		require.True(t, onebot.EqualMessages(m, back))
	}
}

func TestMessageJSON(t *testing.T) {
	t.Parallel()
	var m onebot.Message
	// Lenient data: numbers, booleans, nested values, nulls.
	require.NoError(t, json.Unmarshal([]byte(`[{"type":"reply","data":{"id":-123}},{"type":"at","data":{"qq":10001000,"name":null}},{"type":"x","data":{"b":true,"o":{"k":1}}},{"type":"face","data":null}]`), &m))
	require.Equal(t, onebot.Message{
		seg("reply", "id", "-123"),
		seg("at", "qq", "10001000"),
		seg("x", "b", "true", "o", `{"k":1}`),
		{Type: "face"},
	}, m)
	// A single segment object and null.
	require.NoError(t, json.Unmarshal([]byte(`{"type":"text","data":{"text":"x"}}`), &m))
	require.Equal(t, onebot.Message{text("x")}, m)
	require.NoError(t, json.Unmarshal([]byte(`null`), &m))
	require.Nil(t, m)
	require.Error(t, json.Unmarshal([]byte(`[1,2]`), &m))
	require.Error(t, json.Unmarshal([]byte(`42`), &m))
	// Data is never marshalled as null.
	b, err := json.Marshal(onebot.Message{{Type: "face"}})
	require.NoError(t, err)
	require.JSONEq(t, `[{"type":"face","data":{}}]`, string(b))
	require.Equal(t, "ab", onebot.Message{text("a"), seg("face", "id", "1"), text("b")}.PlainText())
}

func TestValidSegments(t *testing.T) {
	t.Parallel()
	for _, m := range []onebot.Message{
		{text("")},
		{text("a"), text("b")},
		{{Type: "text", Data: map[string]string{"text": "a", "x": "y"}}},
		{seg("bad type")},
		{seg("x", "bad key", "1")},
		{seg("x", "k=", "1")},
		{seg("")},
	} {
		ok, _ := onebot.ValidSegments(m)
		require.False(t, ok, "%+v", m)
	}
}
