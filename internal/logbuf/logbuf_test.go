package logbuf_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/internal/logbuf"
)

func TestBufferConcurrentJSONRecords(t *testing.T) {
	t.Parallel()
	var b logbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&b, nil))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				log.Info("tick", "w", w, "i", i)
				log.Info("other")
			}
		})
	}
	wg.Wait()
	recs, err := b.Records("tick")
	require.NoError(t, err)
	require.Len(t, recs, 200)
	require.Contains(t, b.String(), `"msg":"other"`)

	_, _ = fmt.Fprintln(&b, "not json")
	_, err = b.Records("tick")
	require.ErrorContains(t, err, "line 401")
}
