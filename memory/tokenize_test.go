package memory_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/memory"
)

func TestTokenize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"Hello, World!", []string{"hello", "world"}},
		{"北京", []string{"北京"}},
		{"北京天气", []string{"北京", "京天", "天气"}},
		{"我", []string{"我"}},
		{"我 你", []string{"我", "你"}},
		{"用Go写SQLite", []string{"用", "go", "写", "sqlite"}},
		{"周末用Go写了一个工具", []string{"周末", "末用", "go", "写了", "了一", "一个", "个工", "工具"}},
		{"東京のラーメン", []string{"東京", "京の", "のラ", "ラー", "ーメ", "メン"}},
		{"서울 날씨", []string{"서울", "날씨"}},
		{"Café crème 2026", []string{"café", "crème", "2026"}},
		{"ÄPFEL", []string{"äpfel"}},
		{"it's a_b-c", []string{"it", "s", "a", "b", "c"}},
		{"😀 emoji👍ok", []string{"emoji", "ok"}},
		{"https://example.com/path", []string{"https", "example", "com", "path"}},
		{"价格100元", []string{"价格", "100", "元"}},
		{"，。！北京！", []string{"北京"}},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, memory.Tokenize(tc.in), "Tokenize(%q)", tc.in)
	}
}

func TestQueryTokensAndIndexText(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"favourite", "北京"}, memory.QueryTokens("What is the favourite 北京 of the"))
	require.Equal(t, []string{"the"}, memory.QueryTokens("the the"))
	require.Equal(t, "北京 京天 天气 alice", memory.IndexText("北京天气", "Alice"))
	require.Equal(t, `"a" OR "北京"`, memory.MatchExpr([]string{"a", "北京"}))
	require.Empty(t, memory.MatchExpr(nil))
	long := make([]byte, 100)
	for i := range long {
		long[i] = 'x'
	}
	require.Len(t, memory.Tokenize(string(long))[0], 48)
}

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, memory.EstimateTokens(""))
	require.Equal(t, 2, memory.EstimateTokens("hello"))
	require.Equal(t, 4, memory.EstimateTokens("北京"))
}
