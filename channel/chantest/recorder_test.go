package chantest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
)

var _ channel.Sink = (*chantest.Recorder)(nil)

func msg(id string) channel.Event {
	return channel.Event{Platform: "p", BotID: "b", Kind: channel.KindMessage, Chat: group, Sender: alice, MessageID: id}
}

func ids(evs []channel.Event) []string {
	out := []string{}
	for _, ev := range evs {
		out = append(out, ev.MessageID)
	}
	return out
}

// bounded returns a context that ends after DefaultTimeout, so that a
// Recorder that never wakes its waiters fails the test instead of hanging it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), chantest.DefaultTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestRecorderAccepts(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]*chantest.Recorder{"New": chantest.NewRecorder(), "zero": {}} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			require.Empty(t, r.Events())
			require.Empty(t, r.States())
			require.NoError(t, r.HandleEvent(ctx, msg("1")))
			r.ReportState(ctx, channel.State{Platform: "p", Connected: true})
			require.NoError(t, r.HandleEvent(ctx, msg("2")))
			r.ReportState(ctx, channel.State{Platform: "p", Reason: "stopped"})

			require.Equal(t, []string{"1", "2"}, ids(r.Events()))
			require.Equal(t, []string{"1", "2"}, ids(r.Received()))
			require.Empty(t, r.Refused())
			require.Equal(t, []channel.State{{Platform: "p", Connected: true}, {Platform: "p", Reason: "stopped"}}, r.States())
		})
	}
}

func TestRecorderFailNext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := chantest.NewRecorder()
	r.FailNext(2)
	for _, id := range []string{"1", "2"} {
		ev := msg(id)
		err := r.HandleEvent(ctx, ev)
		require.ErrorIs(t, err, chantest.ErrRefused)
		require.ErrorContains(t, err, ev.Key())
	}
	require.NoError(t, r.HandleEvent(ctx, msg("3")), "only two refusals")
	require.Equal(t, []string{"3"}, ids(r.Events()))
	require.Equal(t, []string{"1", "2"}, ids(r.Refused()))
	require.Equal(t, []string{"1", "2", "3"}, ids(r.Received()))

	r.FailNext(5)
	r.FailNext(1) // replaces, does not add
	require.Error(t, r.HandleEvent(ctx, msg("4")))
	require.NoError(t, r.HandleEvent(ctx, msg("5")))

	r.FailNext(3)
	r.FailNext(0) // cancels
	require.NoError(t, r.HandleEvent(ctx, msg("6")))
	r.FailNext(-1)
	require.NoError(t, r.HandleEvent(ctx, msg("7")))
	require.Equal(t, []string{"3", "5", "6", "7"}, ids(r.Events()))
	require.Equal(t, []string{"1", "2", "4"}, ids(r.Refused()))
}

type ctxKey struct{}

func TestRecorderHandler(t *testing.T) {
	t.Parallel()
	r := chantest.NewRecorder()
	nack := errors.New("store down")
	var seen []string
	r.SetHandler(func(ctx context.Context, ev channel.Event) error {
		// Called without the lock: reading the Recorder does not deadlock.
		seen = append(seen, fmt.Sprintf("%s after %d, ctx %v", ev.MessageID, len(r.Received()), ctx.Value(ctxKey{})))
		if ev.MessageID == "bad" {
			return nack
		}
		return nil
	})
	ctx := context.WithValue(t.Context(), ctxKey{}, "v")
	// On another goroutine, so that a handler called under the lock fails
	// the test rather than deadlocking it.
	first := make(chan [2]error, 1)
	go func() { first <- [2]error{r.HandleEvent(ctx, msg("bad")), r.HandleEvent(ctx, msg("good"))} }()
	var errs [2]error
	select {
	case errs = <-first:
	case <-bounded(t).Done():
		require.FailNow(t, "HandleEvent deadlocked: the handler must run without the Recorder's lock")
	}
	require.ErrorIs(t, errs[0], nack)
	require.NoError(t, errs[1])
	require.Equal(t, []string{"bad after 0, ctx v", "good after 1, ctx v"}, seen, "the handler gets HandleEvent's context")
	require.Equal(t, []string{"good"}, ids(r.Events()))
	require.Equal(t, []string{"bad"}, ids(r.Refused()))
	require.Equal(t, []string{"bad", "good"}, ids(r.Received()))

	// The handler decides first; a refusal of its own leaves FailNext's
	// count alone, an acceptance uses it up.
	r.FailNext(1)
	err := r.HandleEvent(ctx, msg("bad"))
	require.ErrorIs(t, err, nack)
	require.NotErrorIs(t, err, chantest.ErrRefused)
	require.ErrorIs(t, r.HandleEvent(ctx, msg("x")), chantest.ErrRefused)
	require.NoError(t, r.HandleEvent(ctx, msg("y")))

	r.SetHandler(nil)
	require.NoError(t, r.HandleEvent(t.Context(), msg("bad")), "a nil handler accepts")
	require.Equal(t, []string{"good", "y", "bad"}, ids(r.Events()))
	require.Equal(t, []string{"bad", "bad", "x"}, ids(r.Refused()))
}

func TestRecorderCopies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := chantest.NewRecorder()
	require.NoError(t, r.HandleEvent(ctx, msg("1")))
	r.FailNext(1)
	require.Error(t, r.HandleEvent(ctx, msg("2")))
	r.ReportState(ctx, channel.State{Reason: "r"})

	evs, ref, rec, sts := r.Events(), r.Refused(), r.Received(), r.States()
	evs[0].MessageID, ref[0].MessageID, rec[0].MessageID, sts[0].Reason = "x", "x", "x", "x"

	require.Equal(t, []string{"1"}, ids(r.Events()))
	require.Equal(t, []string{"2"}, ids(r.Refused()))
	require.Equal(t, []string{"1", "2"}, ids(r.Received()))
	require.Equal(t, []channel.State{{Reason: "r"}}, r.States())
}

func TestRecorderWaitWakesOnChange(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	r := chantest.NewRecorder()
	r.FailNext(1)
	for _, tc := range []struct {
		name   string
		cond   func(evs, refused []channel.Event, sts []channel.State) bool
		change func()
	}{
		{"refused", func(_, refused []channel.Event, _ []channel.State) bool { return len(refused) == 1 },
			func() { require.Error(t, r.HandleEvent(ctx, msg("1"))) }},
		{"accepted", func(evs, _ []channel.Event, _ []channel.State) bool { return len(evs) == 1 },
			func() { require.NoError(t, r.HandleEvent(ctx, msg("2"))) }},
		{"state", func(_, _ []channel.Event, sts []channel.State) bool { return len(sts) == 1 && sts[0].Online },
			func() { r.ReportState(ctx, channel.State{Online: true}) }},
	} {
		checked := make(chan struct{}, 1)
		done := make(chan error, 1)
		go func() {
			done <- r.Wait(ctx, func(evs, refused []channel.Event, sts []channel.State) bool {
				select {
				case checked <- struct{}{}:
				default:
				}
				return tc.cond(evs, refused, sts)
			})
		}()
		<-checked // Wait checked once and found nothing yet
		select {
		case err := <-done:
			require.Failf(t, "Wait returned before the change", "%s: %v", tc.name, err)
		default:
		}
		tc.change()
		require.NoError(t, <-done, tc.name)
	}
}

func TestRecorderWaitContext(t *testing.T) {
	t.Parallel()
	r := chantest.NewRecorder()
	never := func(_, _ []channel.Event, _ []channel.State) bool { return false }

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Wait(ctx, never) }()
	r.ReportState(t.Context(), channel.State{}) // a change that does not satisfy
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-bounded(t).Done():
		require.FailNow(t, "Wait did not return when its context was cancelled")
	}

	expired, cancel2 := context.WithTimeout(t.Context(), 0)
	defer cancel2()
	require.ErrorIs(t, r.Wait(expired, never), context.DeadlineExceeded)

	always := func(_, _ []channel.Event, _ []channel.State) bool { return true }
	require.NoError(t, r.Wait(ctx, always), "a condition that holds wins over an ended context")
}

func TestRecorderConcurrent(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	r := chantest.NewRecorder()
	var refusedByHandler sync.Map
	r.SetHandler(func(_ context.Context, ev channel.Event) error {
		if ev.MessageID[0] == 'h' {
			refusedByHandler.Store(ev.MessageID, true)
			return errors.New("no")
		}
		return nil
	})
	const n = 50
	done := make(chan error, 1)
	go func() {
		done <- r.Wait(ctx, func(evs, refused []channel.Event, sts []channel.State) bool {
			return len(evs) == n && len(refused) == n && len(sts) == n
		})
	}()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _ = r.HandleEvent(ctx, msg(fmt.Sprint("a", i))) })
		wg.Go(func() { _ = r.HandleEvent(ctx, msg(fmt.Sprint("h", i))) })
		wg.Go(func() { r.ReportState(ctx, channel.State{Reason: fmt.Sprint(i)}) })
		wg.Go(func() { _ = r.Events(); _ = r.Refused(); _ = r.States(); _ = r.Received() })
	}
	wg.Wait()
	require.NoError(t, <-done)
	require.Len(t, r.Received(), 2*n)
	for _, ev := range r.Refused() {
		_, ok := refusedByHandler.Load(ev.MessageID)
		require.True(t, ok, ev.MessageID)
	}
}
