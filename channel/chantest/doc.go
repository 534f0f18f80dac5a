// Package chantest provides an in-memory [channel.Channel] for tests and
// examples, and [Conformance], the suite every platform adapter runs against
// its protocol-faithful fake platform server.
//
// # Overview
//
// [New] returns a [Channel] that needs no network. A test injects platform
// messages with [Channel.Inject] or [Channel.Say]; they reach the [channel.Sink]
// given to [Channel.Run], and the sink's error comes back to the caller, so a
// NACK is visible. Sends are captured in order with their clock time and read
// back with [Channel.Sent], or awaited with [Channel.WaitSent]. Failures are
// scripted: [Channel.SetOnline] takes the account offline (sends fail with
// channel.ErrOffline and the state is reported to the sink) and
// [Channel.FailNext] fails the next sends with a chosen error. The channel
// implements the optional capabilities (typing, history with ChatLister,
// recall, member lookup, text limit) over the messages it has seen;
// [Channel.Bare] hides them. With Config.Discard it keeps no record at all
// (no captured sends, no history), for benchmarks.
//
// [Recorder] is the sink for adapter tests: it records the events it accepts
// and refuses and every state report, refuses events on demand
// ([Recorder.FailNext], [Recorder.SetHandler]) and waits for a condition
// ([Recorder.Wait]).
//
//	ch := chantest.New(chantest.Config{Clock: fakeClock})
//	go ch.Run(ctx, pipeline)
//	ev, err := ch.Say(ctx, group, alice, "hi", chantest.MentionBot())
//	sent, err := ch.WaitSent(ctx, 1)
//
// # Implementing
//
// An adapter package proves the duties every adapter owes (it normalises
// events, acks an event only once it is stored, classifies send errors, and
// the rest that [Conformance] lists) by running
//
//	func TestConformance(t *testing.T) {
//		chantest.Conformance(t, chantest.HarnessFunc(func(t *testing.T) chantest.Env {
//			srv := newFakeServer(t)             // the fake platform
//			ch := New(Config{URL: srv.URL()})   // the adapter under test
//			return chantest.Env{Channel: ch, Platform: srv, BotID: srv.BotID(),
//				Caps: chantest.Capabilities{Redelivers: true, Offline: true, Reject: true}}
//		}))
//	}
//
// where the fake server implements [PlatformDriver]: Emit pushes an inbound
// message the way the real platform would, Received lists what the bot sent,
// and SetOffline and RejectNextSend (used only when the matching
// [Capabilities] flag is set) script failures. Each subtest calls
// [Harness.Start] for a fresh environment and calls Run itself. Subtests run
// one after the other unless the harness implements [ParallelHarness].
//
// # Concurrency
//
// A Channel is safe for concurrent use: Send, Inject, the capabilities and
// the inspection methods may be called from any goroutine. Inject calls the
// sink on the caller's goroutine. Conformance calls the PlatformDriver from
// the test goroutine only, but Send from several goroutines at once.
package chantest
