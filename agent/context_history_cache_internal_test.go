package agent

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A full history cache makes room for a new session by dropping one entry,
// not all of them; a session already in it takes no room.
func TestHistoryCacheDropsOneEntryWhenFull(t *testing.T) {
	c := newHistoryCache(4)
	for i := range 10 {
		key := string(rune('a' + i))
		c.put(key, &historyRender{})
		require.Len(t, c.m, min(i+1, 4))
		require.NotNil(t, c.get(key))
	}
	c.put("j", &historyRender{})
	require.Len(t, c.m, 4)
	require.Nil(t, newHistoryCache(-1), "a negative size turns the cache off")
}
