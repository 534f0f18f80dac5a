package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/store/postgres"
)

// open opens a store on a fresh schema, closed when t ends.
func open(t *testing.T, clk clock.Clock) *postgres.DB {
	t.Helper()
	return openURL(t, pgtest.Schema(t), clk)
}

func openURL(t *testing.T, url string, clk clock.Clock) *postgres.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := postgres.Open(ctx, url, postgres.Options{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestOpenMigratesOnceUnderConcurrency(t *testing.T) {
	url := pgtest.Schema(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := postgres.Open(context.Background(), url, postgres.Options{})
			if err == nil {
				_ = db.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	db := openURL(t, url, nil)
	require.NotEmpty(t, db.Schema())
}

func TestSubscribeWakesAcrossStores(t *testing.T) {
	url := pgtest.Schema(t)
	a := openURL(t, url, nil)
	b := openURL(t, url, nil)
	got := make(chan string, 16)
	stop := b.Subscribe("test", func(p string) {
		if p != "" {
			got <- p
		}
	})
	defer stop()
	deadline := time.After(20 * time.Second)
	for {
		require.NoError(t, a.NotifyForTest(context.Background(), "test", "hello"))
		select {
		case p := <-got:
			require.Equal(t, "hello", p)
			return
		case <-time.After(200 * time.Millisecond):
			// The listener may not be listening yet: notify again.
		case <-deadline:
			t.Fatal("no notification within 20 s")
		}
	}
}
