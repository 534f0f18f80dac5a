package gate_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/gate/gatetest"
)

// batchFlags is a gate.BatchFlags over in-memory flags that counts its
// batch writes and can hold the first one until release is closed.
type batchFlags struct {
	*gatetest.Flags
	batches atomic.Int32
	hold    chan struct{} // nil = never hold
	release chan struct{}
}

func (b *batchFlags) SetFlags(ctx context.Context, fs []gate.Flag) error {
	if b.batches.Add(1) == 1 && b.hold != nil {
		close(b.hold)
		<-b.release
	}
	return gate.SetFlags(ctx, b.Flags, fs)
}

func TestFlagQuotaCoalescesConcurrentAdds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &batchFlags{Flags: gatetest.NewFlags(), hold: make(chan struct{}), release: make(chan struct{})}
		q := gate.NewFlagQuota(f)
		bot := gate.QuotaKey{Scope: gate.QuotaBot, ID: "b", Day: "2026-03-02"}
		user := func(i int) gate.QuotaKey {
			return gate.QuotaKey{Scope: gate.QuotaUser, ID: string(rune('a' + i)), Day: "2026-03-02"}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 11)
		wg.Go(func() { errs <- q.AddAll(context.Background(), []gate.QuotaKey{bot, user(0)}, 1) })
		<-f.hold // the first write is in flight
		for i := range 10 {
			wg.Go(func() { errs <- q.AddAll(context.Background(), []gate.QuotaKey{bot, user(i % 3)}, 1) })
		}
		synctest.Wait() // every later add waits for the next write
		close(f.release)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}

		require.EqualValues(t, 2, f.batches.Load(), "the adds made during the first write share the second")
		n, err := q.Used(t.Context(), bot)
		require.NoError(t, err)
		require.Equal(t, 11, n)
		for i, want := range []int{5, 3, 3} {
			n, err := q.Used(t.Context(), user(i))
			require.NoError(t, err)
			require.Equal(t, want, n, "user %d", i)
		}
	})
}

func TestFlagQuotaAddAll(t *testing.T) {
	t.Parallel()
	f := &batchFlags{Flags: gatetest.NewFlags()}
	q := gate.NewFlagQuota(f)
	a := gate.QuotaKey{Scope: gate.QuotaBot, ID: "a", Day: "2026-03-02"}
	b := gate.QuotaKey{Scope: gate.QuotaUser, ID: "b", Day: "2026-03-02"}
	require.NoError(t, q.AddAll(t.Context(), []gate.QuotaKey{a, b, a}, 2))
	require.NoError(t, q.AddAll(t.Context(), nil, 1), "no keys, nothing to count")
	n, err := q.Used(t.Context(), a)
	require.NoError(t, err)
	require.Equal(t, 4, n, "a key given twice counts twice")
	n, err = q.Used(t.Context(), b)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.EqualValues(t, 1, f.batches.Load(), "one write for all keys")

	require.ErrorContains(t, q.AddAll(t.Context(), []gate.QuotaKey{a, {Scope: gate.QuotaBot, ID: "x", Day: "soon"}}, 1), "quota day")
	n, err = q.Used(t.Context(), a)
	require.NoError(t, err)
	require.Equal(t, 4, n, "a bad day counts nothing")

	// A cancelled caller still has its call counted: the write is not
	// interrupted half way.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, q.AddAll(ctx, []gate.QuotaKey{a}, 1))
	n, err = q.Used(t.Context(), a)
	require.NoError(t, err)
	require.Equal(t, 5, n)

	f.FailWith(errBroken)
	require.ErrorIs(t, q.AddAll(t.Context(), []gate.QuotaKey{a, b}, 1), errBroken)
	require.ErrorIs(t, q.Add(t.Context(), a, 1), errBroken, "a failed write does not wedge the quota")
	f.FailWith(nil)
	require.NoError(t, q.Add(t.Context(), a, 1))
	n, err = q.Used(t.Context(), a)
	require.NoError(t, err)
	require.Equal(t, 6, n)
}

func TestFlagQuotaWithoutBatchFlags(t *testing.T) {
	t.Parallel()
	f := gatetest.NewFlags()
	q := gate.NewFlagQuota(f)
	a := gate.QuotaKey{Scope: gate.QuotaBot, ID: "a", Day: "2026-03-02"}
	b := gate.QuotaKey{Scope: gate.QuotaUser, ID: "b", Day: "2026-03-02"}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				_ = q.AddAll(context.Background(), []gate.QuotaKey{a, b}, 1)
			}
		})
	}
	wg.Wait()
	for _, k := range []gate.QuotaKey{a, b} {
		n, err := q.Used(t.Context(), k)
		require.NoError(t, err)
		require.Equal(t, 200, n)
	}
	f.FailWith(errBroken)
	require.ErrorIs(t, q.AddAll(t.Context(), []gate.QuotaKey{a, b}, 1), errBroken)
}
