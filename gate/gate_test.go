package gate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/outcome"
)

// recorder builds gates that log their calls.
type recorder struct{ calls []string }

func (r *recorder) pass(name string) gate.Gate {
	return gate.New(name, func(context.Context, *gate.Turn) gate.Verdict {
		r.calls = append(r.calls, name)
		return gate.Pass
	})
}

func (r *recorder) stop(name string, code outcome.Code) gate.Gate {
	return gate.New(name, func(context.Context, *gate.Turn) gate.Verdict {
		r.calls = append(r.calls, name)
		return gate.Stopped(code, name+" said no")
	})
}

func names(c gate.Chain) []string {
	out := make([]string, len(c))
	for i, g := range c {
		out[i] = g.Name()
	}
	return out
}

func TestVerdictBasics(t *testing.T) {
	t.Parallel()
	require.Equal(t, gate.Verdict{}, gate.Pass, "the zero verdict passes")
	require.False(t, gate.Pass.Stop)
	v := gate.Stopped("ignored_x", "because")
	require.Equal(t, gate.Verdict{Stop: true, Code: "ignored_x", Reason: "because"}, v)
	require.True(t, gate.IgnoredProactiveOff.Valid())
	require.Equal(t, outcome.Code("ignored_proactive_off"), gate.IgnoredProactiveOff)
	require.Equal(t, outcome.IgnoredPrivateAdmission, gate.IgnoredPrivateAdmission)
}

func TestFuncAndNew(t *testing.T) {
	t.Parallel()
	var seen *gate.Turn
	g := gate.New("g1", func(ctx context.Context, tr *gate.Turn) gate.Verdict {
		require.NotNil(t, ctx)
		seen = tr
		return gate.Stopped("ignored_x", "r")
	})
	require.Equal(t, "g1", g.Name())
	turn := &gate.Turn{SessionKey: "s"}
	require.Equal(t, gate.Stopped("ignored_x", "r"), g.Check(t.Context(), turn), "a bare gate does not name itself")
	require.Same(t, turn, seen)

	f := gate.Func{GateName: "f", F: func(context.Context, *gate.Turn) gate.Verdict { return gate.Pass }}
	require.Equal(t, "f", f.Name())
	require.Equal(t, gate.Pass, f.Check(t.Context(), turn))
}

func TestChainCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		build     func(r *recorder) gate.Chain
		wantCalls []string
		want      gate.Verdict
	}{
		{
			name:  "empty chain passes",
			build: func(*recorder) gate.Chain { return nil },
			want:  gate.Pass,
		},
		{
			name:      "all pass",
			build:     func(r *recorder) gate.Chain { return gate.Chain{r.pass("a"), r.pass("b"), r.pass("c")} },
			wantCalls: []string{"a", "b", "c"},
			want:      gate.Pass,
		},
		{
			name: "first stop wins and names the gate",
			build: func(r *recorder) gate.Chain {
				return gate.Chain{r.pass("a"), r.stop("b", "ignored_b"), r.stop("c", "ignored_c"), r.pass("d")}
			},
			wantCalls: []string{"a", "b"},
			want:      gate.Verdict{Stop: true, Code: "ignored_b", Reason: "b said no", Gate: "b"},
		},
		{
			name:      "stop at the first gate",
			build:     func(r *recorder) gate.Chain { return gate.Chain{r.stop("a", "ignored_a"), r.pass("b")} },
			wantCalls: []string{"a"},
			want:      gate.Verdict{Stop: true, Code: "ignored_a", Reason: "a said no", Gate: "a"},
		},
		{
			name:      "stop at the last gate",
			build:     func(r *recorder) gate.Chain { return gate.Chain{r.pass("a"), r.stop("z", "ignored_z")} },
			wantCalls: []string{"a", "z"},
			want:      gate.Verdict{Stop: true, Code: "ignored_z", Reason: "z said no", Gate: "z"},
		},
		{
			name: "nested chain names the inner gate",
			build: func(r *recorder) gate.Chain {
				inner := gate.Chain{r.pass("i1"), r.stop("i2", "ignored_i2")}
				return gate.Chain{r.pass("a"), inner, r.pass("b")}
			},
			wantCalls: []string{"a", "i1", "i2"},
			want:      gate.Verdict{Stop: true, Code: "ignored_i2", Reason: "i2 said no", Gate: "i2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{}
			c := tt.build(r)
			require.Equal(t, tt.want, c.Check(t.Context(), &gate.Turn{}))
			require.Equal(t, tt.wantCalls, r.calls)
		})
	}
}

func TestChainIsAGate(t *testing.T) {
	t.Parallel()
	var g gate.Gate = gate.Chain{}
	require.Equal(t, "chain", g.Name())
}

func TestChainInsertRemoveReplace(t *testing.T) {
	t.Parallel()
	// Subtests run in parallel, so each one builds its own chain (and
	// recorder) with newBase.
	newBase := func() (gate.Chain, *recorder) {
		r := &recorder{}
		return gate.Chain{r.pass("a"), r.pass("b"), r.pass("c")}, r
	}

	t.Run("insert before", func(t *testing.T) {
		t.Parallel()
		base, r := newBase()
		got := base.Insert("b", r.pass("x"))
		require.Equal(t, []string{"a", "x", "b", "c"}, names(got))
		require.Equal(t, []string{"a", "b", "c"}, names(base), "Insert does not modify the chain")
	})
	t.Run("insert before first", func(t *testing.T) {
		t.Parallel()
		base, r := newBase()
		require.Equal(t, []string{"x", "a", "b", "c"}, names(base.Insert("a", r.pass("x"))))
	})
	t.Run("insert unknown appends", func(t *testing.T) {
		t.Parallel()
		base, r := newBase()
		require.Equal(t, []string{"a", "b", "c", "x"}, names(base.Insert("nope", r.pass("x"))))
	})
	t.Run("insert into empty", func(t *testing.T) {
		t.Parallel()
		_, r := newBase()
		require.Equal(t, []string{"x"}, names(gate.Chain(nil).Insert("a", r.pass("x"))))
	})
	t.Run("insert only once before duplicates", func(t *testing.T) {
		t.Parallel()
		_, r := newBase()
		dup := gate.Chain{r.pass("a"), r.pass("b"), r.pass("b")}
		require.Equal(t, []string{"a", "x", "b", "b"}, names(dup.Insert("b", r.pass("x"))))
	})
	t.Run("remove", func(t *testing.T) {
		t.Parallel()
		base, r := newBase()
		require.Equal(t, []string{"a", "c"}, names(base.Remove("b")))
		require.Equal(t, []string{"a", "b", "c"}, names(base.Remove("nope")))
		require.Equal(t, []string{"a", "b", "c"}, names(base), "Remove does not modify the chain")
		require.Empty(t, gate.Chain{r.pass("a")}.Remove("a"))
	})
	t.Run("replace", func(t *testing.T) {
		t.Parallel()
		base, r := newBase()
		rr := &recorder{}
		got := base.Replace(rr.stop("b", "ignored_new_b"))
		require.Equal(t, []string{"a", "b", "c"}, names(got))
		v := got.Check(t.Context(), &gate.Turn{})
		require.Equal(t, gate.Verdict{Stop: true, Code: "ignored_new_b", Reason: "b said no", Gate: "b"}, v)
		require.Equal(t, []string{"b"}, rr.calls, "the replacement runs in the old gate's place")
		require.Equal(t, []string{"a"}, r.calls, "gates before the replacement ran; the old b did not")
		require.Equal(t, gate.Pass, base.Check(t.Context(), &gate.Turn{}), "Replace does not modify the chain")
	})
	t.Run("replace unknown keeps the chain", func(t *testing.T) {
		t.Parallel()
		base, r := newBase()
		got := base.Replace(r.stop("nope", "ignored_x"))
		require.Equal(t, []string{"a", "b", "c"}, names(got))
		require.Equal(t, gate.Pass, got.Check(t.Context(), &gate.Turn{}))
	})
}

func TestProactiveSwitch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		direct  bool
		enabled bool
		stop    bool
	}{
		{name: "direct, switch off", direct: true, enabled: false, stop: false},
		{name: "direct, switch on", direct: true, enabled: true, stop: false},
		{name: "unprompted, switch on", direct: false, enabled: true, stop: false},
		{name: "unprompted, switch off", direct: false, enabled: false, stop: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			turn := &gate.Turn{Direct: tt.direct, SessionKey: "k", Now: time.Now()}
			g := gate.ProactiveSwitch(func(got *gate.Turn) bool {
				require.Same(t, turn, got)
				return tt.enabled
			})
			require.Equal(t, "proactive_switch", g.Name())
			v := g.Check(t.Context(), turn)
			require.Equal(t, tt.stop, v.Stop)
			if tt.stop {
				require.Equal(t, gate.IgnoredProactiveOff, v.Code)
				require.NotEmpty(t, v.Reason)
				chained := gate.Chain{g}.Check(t.Context(), turn)
				require.Equal(t, "proactive_switch", chained.Gate)
			} else {
				require.Equal(t, gate.Pass, v)
			}
		})
	}
}

func TestProactiveSwitchSkipsEnabledForDirect(t *testing.T) {
	t.Parallel()
	g := gate.ProactiveSwitch(func(*gate.Turn) bool {
		t.Fatal("enabled consulted for a direct turn")
		return false
	})
	require.Equal(t, gate.Pass, g.Check(t.Context(), &gate.Turn{Direct: true, Trigger: "mention"}))
}

func TestFlagActive(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := gate.Flag{SessionKey: "s", Name: "stop", Until: now.Add(time.Minute)}
	require.True(t, f.Active(now))
	require.True(t, f.Active(now.Add(time.Minute-time.Nanosecond)))
	require.False(t, f.Active(now.Add(time.Minute)), "inactive from Until on")
	require.False(t, f.Active(now.Add(time.Hour)))
	require.False(t, gate.Flag{}.Active(now), "a zero flag is inactive")
}

// event returns a message event in chat from sender.
func event(kind channel.ChatKind, sender string) *channel.Event {
	return &channel.Event{
		Platform: "onebot", BotID: "bot", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: kind, ID: "c1"}, MessageID: "m1",
		Sender: channel.Sender{ID: sender},
	}
}
