package gate_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/gate/gatetest"
)

// countingFlags wraps a Flags, counting reads and letting a test hook into
// them.
type countingFlags struct {
	gate.Flags
	reads  atomic.Int32
	onRead func()
}

func (c *countingFlags) GetFlag(ctx context.Context, s, sub, n string) (gate.Flag, bool, error) {
	c.reads.Add(1)
	f, ok, err := c.Flags.GetFlag(ctx, s, sub, n)
	if c.onRead != nil {
		c.onRead()
	}
	return f, ok, err
}

func TestFlagCacheConformance(t *testing.T) {
	t.Parallel()
	gatetest.RunFlags(t, func(*testing.T) gate.Flags {
		return gate.NewFlagCache(gatetest.NewFlags(), gate.FlagCacheConfig{})
	})
}

func TestFlagCacheReadsOnce(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	inner := &countingFlags{Flags: gatetest.NewFlags()}
	c := gate.NewFlagCache(inner, gate.FlagCacheConfig{Clock: clk})
	ctx := t.Context()
	for range 3 {
		_, ok, err := c.GetFlag(ctx, "s", "", "n")
		require.NoError(t, err)
		require.False(t, ok)
	}
	require.EqualValues(t, 1, inner.reads.Load(), "absence is cached too")

	require.NoError(t, c.SetFlag(ctx, gate.Flag{SessionKey: "s", Name: "n", Until: t0.Add(time.Hour), Value: "v"}))
	f, ok, err := c.GetFlag(ctx, "s", "", "n")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "v", f.Value, "a write through the cache is seen at once")
	require.EqualValues(t, 1, inner.reads.Load())
	stored, ok, err := inner.Flags.GetFlag(ctx, "s", "", "n")
	require.NoError(t, err)
	require.True(t, ok, "written through to the store")
	require.Equal(t, "v", stored.Value)

	require.NoError(t, c.ClearFlag(ctx, "s", "", "n"))
	_, ok, _ = c.GetFlag(ctx, "s", "", "n")
	require.False(t, ok)
	require.EqualValues(t, 1, inner.reads.Load())

	// A write that bypassed the cache is seen after the TTL.
	require.NoError(t, inner.SetFlag(ctx, gate.Flag{SessionKey: "s", Name: "n", Value: "outside"}))
	_, ok, _ = c.GetFlag(ctx, "s", "", "n")
	require.False(t, ok)
	clk.Advance(time.Minute)
	f, ok, _ = c.GetFlag(ctx, "s", "", "n")
	require.True(t, ok)
	require.Equal(t, "outside", f.Value)
	require.EqualValues(t, 2, inner.reads.Load())
}

// probingFlags counts the subject probes of a gatetest.Flags.
type probingFlags struct {
	countingFlags
	probes atomic.Int32
}

func (p *probingFlags) HasSubjectFlags(ctx context.Context, s, n string) (bool, error) {
	p.probes.Add(1)
	return p.countingFlags.Flags.(gate.SubjectFlagProber).HasSubjectFlags(ctx, s, n)
}

// TestFlagCacheSubjectProbe: in a session without per-subject flags of a
// name, every member's lookup is answered by one probe; a write through
// the cache ends that answer at once.
func TestFlagCacheSubjectProbe(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	inner := &probingFlags{countingFlags: countingFlags{Flags: gatetest.NewFlags()}}
	c := gate.NewFlagCache(inner, gate.FlagCacheConfig{Clock: clk})
	ctx := t.Context()
	for i := range 50 {
		_, ok, err := c.GetFlag(ctx, "s", fmt.Sprint("u", i), "pause")
		require.NoError(t, err)
		require.False(t, ok)
	}
	require.EqualValues(t, 1, inner.probes.Load(), "one probe for the whole session")
	require.EqualValues(t, 0, inner.reads.Load(), "no per-member reads")

	require.NoError(t, c.SetFlag(ctx, gate.Flag{SessionKey: "s", Subject: "u7", Name: "pause", Until: t0.Add(time.Hour)}))
	f, ok, err := c.GetFlag(ctx, "s", "u7", "pause")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "u7", f.Subject)
	_, ok, err = c.GetFlag(ctx, "s", "u8", "pause")
	require.NoError(t, err)
	require.False(t, ok)
	require.EqualValues(t, 2, inner.probes.Load(), "the write ended the absence answer")
	require.EqualValues(t, 1, inner.reads.Load(), "the probe found flags, so u8 was read")

	// A batch write through the cache ends the answer as well.
	_, ok, err = c.GetFlag(ctx, "s3", "u1", "pause")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, c.SetFlags(ctx, []gate.Flag{{SessionKey: "s3", Subject: "u2", Name: "pause"}}))
	_, ok, err = c.GetFlag(ctx, "s3", "u2", "pause")
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = c.GetFlag(ctx, "s3", "u1", "pause")
	require.NoError(t, err)
	require.False(t, ok)

	// A flag written behind the cache's back is seen once the answer expires.
	_, ok, err = c.GetFlag(ctx, "s2", "u1", "pause")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, inner.SetFlag(ctx, gate.Flag{SessionKey: "s2", Subject: "u1", Name: "pause"}))
	clk.Advance(time.Minute)
	_, ok, err = c.GetFlag(ctx, "s2", "u1", "pause")
	require.NoError(t, err)
	require.True(t, ok)
}

func TestFlagCacheNoExpiry(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	inner := &countingFlags{Flags: gatetest.NewFlags()}
	c := gate.NewFlagCache(inner, gate.FlagCacheConfig{Clock: clk, TTL: -1})
	_, _, _ = c.GetFlag(t.Context(), "s", "", "n")
	clk.Advance(24 * time.Hour)
	_, _, _ = c.GetFlag(t.Context(), "s", "", "n")
	require.EqualValues(t, 1, inner.reads.Load())
}

func TestFlagCacheErrors(t *testing.T) {
	t.Parallel()
	inner := gatetest.NewFlags()
	c := gate.NewFlagCache(inner, gate.FlagCacheConfig{})
	ctx := t.Context()
	require.NoError(t, c.SetFlag(ctx, gate.Flag{SessionKey: "s", Name: "n", Value: "cached"}))
	inner.FailWith(errBroken)
	require.ErrorIs(t, c.SetFlag(ctx, gate.Flag{SessionKey: "s", Name: "n", Value: "new"}), errBroken)
	_, _, err := c.GetFlag(ctx, "s", "", "n")
	require.ErrorIs(t, err, errBroken, "after a failed write the key is read from the store again")
	require.ErrorIs(t, c.ClearFlag(ctx, "s", "", "n"), errBroken)
	_, _, err = c.GetFlag(ctx, "other", "", "n")
	require.ErrorIs(t, err, errBroken, "errors are not cached")
	inner.FailWith(nil)
	f, ok, err := c.GetFlag(ctx, "s", "", "n")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "cached", f.Value)
}

// TestFlagCacheRacingFill: a read that started before a write must not
// put its older value into the cache.
func TestFlagCacheRacingFill(t *testing.T) {
	t.Parallel()
	inner := &countingFlags{Flags: gatetest.NewFlags()}
	c := gate.NewFlagCache(inner, gate.FlagCacheConfig{})
	ctx := t.Context()
	inner.onRead = func() {
		inner.onRead = nil
		// The write lands between the store read and the cache fill.
		require.NoError(t, c.SetFlag(ctx, gate.Flag{SessionKey: "s", Name: "n", Value: "new"}))
	}
	_, ok, err := c.GetFlag(ctx, "s", "", "n")
	require.NoError(t, err)
	require.False(t, ok, "the racing read returns what it read")
	f, ok, err := c.GetFlag(ctx, "s", "", "n")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "new", f.Value, "but did not overwrite the newer cached value")
}

// TestFlagCacheFillSurvivesOtherWrites: a write to another session while a
// read is on its way to the store does not keep the read's answer out of
// the cache (under a steady rate of writes, a cache that dropped every
// fill raced by any write read the store nearly every time).
func TestFlagCacheFillSurvivesOtherWrites(t *testing.T) {
	t.Parallel()
	other := "other"
	for i := 0; gate.GenSlot(other, "n") == gate.GenSlot("s", "n"); i++ {
		other = fmt.Sprint("other", i)
	}
	inner := &countingFlags{Flags: gatetest.NewFlags()}
	c := gate.NewFlagCache(inner, gate.FlagCacheConfig{})
	ctx := t.Context()
	inner.onRead = func() {
		inner.onRead = nil
		require.NoError(t, c.SetFlag(ctx, gate.Flag{SessionKey: other, Name: "n", Value: "x"}))
		require.NoError(t, c.SetFlag(ctx, gate.Flag{SessionKey: other, Subject: "u", Name: "n", Value: "x"}))
	}
	for range 3 {
		_, ok, err := c.GetFlag(ctx, "s", "", "n")
		require.NoError(t, err)
		require.False(t, ok)
	}
	require.EqualValues(t, 1, inner.reads.Load(), "the first read's answer was cached")
}

func TestFlagCacheBounded(t *testing.T) {
	t.Parallel()
	c := gate.NewFlagCache(gatetest.NewFlags(), gate.FlagCacheConfig{Max: 8})
	for i := range 100 {
		_, _, err := c.GetFlag(t.Context(), "s", string(rune('a'+i%26))+string(rune('a'+i/26)), "n")
		require.NoError(t, err)
		require.LessOrEqual(t, c.Len(), 8)
	}
}
