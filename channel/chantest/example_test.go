package chantest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
)

// An echo bot wired to the in-memory channel: a message is injected, the
// sink answers it, and the test reads what was sent.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	clk := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	ch := chantest.New(chantest.Config{BotID: "bot", Clock: clk})
	echo := channel.SinkFunc(func(ctx context.Context, ev channel.Event) error {
		if !ev.Mentions("bot") {
			return nil
		}
		_, err := ch.Send(ctx, channel.Outgoing{Chat: ev.Chat, Text: "you said: " + ev.Text(), ReplyTo: ev.MessageID})
		return err
	})
	go func() { _ = ch.Run(ctx, echo) }()

	group := channel.Chat{Kind: channel.Group, ID: "42"}
	alice := channel.Sender{ID: "7", Name: "Alice"}
	if _, err := ch.Say(ctx, group, alice, "hello", chantest.MentionBot()); err != nil {
		fmt.Println(err)
	}
	sent, err := ch.WaitSent(ctx, 1)
	if err != nil {
		fmt.Println(err)
	}
	for _, s := range sent {
		fmt.Println(s.Out.Chat, s.Out.ReplyTo, s.Out.Text, s.Receipt.MessageIDs, s.At.Format(time.Kitchen))
	}
	// Output:
	// group:42 in-1 you said: hello [out-1] 12:00PM
}

// Scripting send failures: the next send fails with a rate limit, then the
// channel goes offline.
func ExampleChannel_FailNext() {
	ctx := context.Background()
	ch := chantest.New(chantest.Config{})
	out := channel.Outgoing{Chat: channel.Chat{Kind: channel.Private, ID: "7"}, Text: "hi"}

	ch.FailNext(1, &channel.RateLimitedError{RetryAfter: time.Second})
	_, err := ch.Send(ctx, out)
	fmt.Println(channel.Classify(err))
	_, err = ch.Send(ctx, out)
	fmt.Println(channel.Classify(err))
	ch.SetOnline(ctx, false)
	_, err = ch.Send(ctx, out)
	fmt.Println(channel.Classify(err))
	// Output:
	// rate_limited
	// none
	// offline
}
