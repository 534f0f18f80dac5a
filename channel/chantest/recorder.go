package chantest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/personakit/persona/channel"
)

// ErrRefused is wrapped by the error [Recorder.HandleEvent] returns for an
// event it refuses because of [Recorder.FailNext].
var ErrRefused = errors.New("chantest: recorder refuses the event")

// Recorder is a [channel.Sink] for adapter tests: it records the events it
// accepts, those it refuses and every state report, and can refuse events on
// demand. [Recorder.Wait] blocks until what was recorded satisfies a
// condition.
//
// A Recorder is safe for concurrent use. The zero value accepts every event.
type Recorder struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change; nil until needed
	handler  func(ctx context.Context, ev channel.Event) error
	fail     int
	accepted []channel.Event
	refused  []channel.Event
	received []channel.Event
	states   []channel.State
}

// NewRecorder returns a Recorder that accepts every event.
func NewRecorder() *Recorder { return &Recorder{} }

// changedLocked returns the channel the next change closes.
func (r *Recorder) changedLocked() chan struct{} {
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// notifyLocked wakes every Wait.
func (r *Recorder) notifyLocked() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// HandleEvent implements [channel.Sink]. The handler set with
// [Recorder.SetHandler], if any, decides first, outside the Recorder's lock
// and with ctx; when it accepts and [Recorder.FailNext] has refusals left,
// one of them is used and the answer is an error wrapping [ErrRefused].
// The event is then recorded as accepted (nil answer) or refused.
func (r *Recorder) HandleEvent(ctx context.Context, ev channel.Event) error {
	r.mu.Lock()
	handler := r.handler
	r.mu.Unlock()
	var err error
	if handler != nil {
		err = handler(ctx, ev)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && r.fail > 0 {
		r.fail--
		err = fmt.Errorf("%w: %s", ErrRefused, ev.Key())
	}
	if err != nil {
		r.refused = append(r.refused, ev)
	} else {
		r.accepted = append(r.accepted, ev)
	}
	r.received = append(r.received, ev)
	r.notifyLocked()
	return err
}

// ReportState implements [channel.Sink]: it records st.
func (r *Recorder) ReportState(_ context.Context, st channel.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, st)
	r.notifyLocked()
}

// SetHandler makes fn decide what HandleEvent answers: an event is refused
// when fn returns an error, which HandleEvent returns. fn is called without
// the Recorder's lock held, possibly from several goroutines at once, and
// may block (on ctx, for instance). A nil fn accepts every event.
func (r *Recorder) SetHandler(fn func(ctx context.Context, ev channel.Event) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handler = fn
}

// FailNext makes HandleEvent refuse the next n events the handler accepts,
// with an error wrapping [ErrRefused]. It replaces any refusals still
// pending; n <= 0 cancels them.
func (r *Recorder) FailNext(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = max(n, 0)
}

// Events returns a copy of the accepted events, in the order they were
// answered.
func (r *Recorder) Events() []channel.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.accepted)
}

// Refused returns a copy of the refused events, in the order they were
// answered.
func (r *Recorder) Refused() []channel.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.refused)
}

// Received returns a copy of every event HandleEvent was given, accepted or
// refused, in the order they were answered.
func (r *Recorder) Received() []channel.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.received)
}

// States returns a copy of the state reports, in order.
func (r *Recorder) States() []channel.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states)
}

// Wait blocks until cond holds, and then returns nil, or until ctx ends,
// and then returns ctx.Err(); cond is checked first, so a condition that
// already holds wins over an ended ctx. cond is called now and after every
// change with the accepted events, the refused events and the state
// reports. It runs under the Recorder's lock, so it must not call the
// Recorder, and it gets the live slices, so it must neither modify nor keep
// them.
func (r *Recorder) Wait(ctx context.Context, cond func(events, refused []channel.Event, states []channel.State) bool) error {
	for {
		r.mu.Lock()
		ok := cond(slices.Clip(r.accepted), slices.Clip(r.refused), slices.Clip(r.states))
		ch := r.changedLocked()
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
