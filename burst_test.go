package persona_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/outcome"
)

// blockingModel answers chat requests only when released, so a test can
// send the same person's next message while the first reply is generating.
type blockingModel struct {
	*agenttest.Model
	mu       sync.Mutex
	started  chan string // the current message of each chat request
	release  chan struct{}
	classify []string // classifier answers, in order
}

func newBlockingModel(classify ...string) *blockingModel {
	b := &blockingModel{started: make(chan string, 10), release: make(chan struct{}, 10), classify: classify}
	b.Model = agenttest.New()
	b.Otherwise(agenttest.Func(b.answer))
	return b
}

func (b *blockingModel) answer(ctx context.Context, req agent.Request) (*agent.Response, error) {
	switch req.Purpose {
	case agent.PurposeClassify:
		b.mu.Lock()
		defer b.mu.Unlock()
		a := b.classify[0]
		b.classify = b.classify[1:]
		return &agent.Response{Text: a}, nil
	case agent.PurposeChat:
		// The current message and any same-turn messages answered with it.
		var parts []string
		for _, m := range req.Messages {
			if strings.HasPrefix(m.Content, "[current]") || strings.HasPrefix(m.Content, "[Same turn]") {
				parts = append(parts, m.Content)
			}
		}
		cur := strings.Join(parts, "\n")
		b.started <- cur
		select {
		case <-b.release:
			return &agent.Response{Text: "reply to: " + strings.ReplaceAll(cur, "\n", " | ")}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &agent.Response{Text: "{}"}, nil
}

func label(l string, conf float64) string {
	return fmt.Sprintf(`{"label":%q,"confidence":%v}`, l, conf)
}

func TestBurstSupplementRegeneratesTheRunningReply(t *testing.T) {
	t.Parallel()
	m := newBlockingModel(label("supplement", 0.9))
	h := newHarness(t, m.Model, nil)
	first := h.say(dmAlice, alice, "what's a good pasta recipe")
	require.Contains(t, <-m.started, "good pasta recipe")
	second := h.say(dmAlice, alice, "without cheese please")
	o := h.outcome(second)
	require.Equal(t, outcome.MergedIntoReply, o.Code)
	regenerated := <-m.started
	require.Contains(t, regenerated, "good pasta recipe")
	require.Contains(t, regenerated, "without cheese please", "the running turn regenerates with the supplement")
	m.release <- struct{}{}
	require.Equal(t, outcome.Replied, h.outcome(first).Code)
	sent := h.ch.Sent()
	require.Len(t, sent, 1, "one reply answers both")
	require.Contains(t, sent[0].Out.Text, "without cheese please")
	rec, err := h.p.Lookup(t.Context(), second.Key())
	require.NoError(t, err)
	require.Equal(t, first.Key(), rec.Outcome.MergedInto)
}

func TestBurstRepeatIsAnsweredByTheRunningReply(t *testing.T) {
	t.Parallel()
	m := newBlockingModel(label("repeat", 0.95))
	h := newHarness(t, m.Model, nil)
	first := h.say(dmAlice, alice, "are you there?")
	<-m.started
	second := h.say(dmAlice, alice, "are you there??")
	require.Equal(t, outcome.SupersededRepeat, h.outcome(second).Code)
	m.release <- struct{}{}
	require.Equal(t, outcome.Replied, h.outcome(first).Code)
	require.Len(t, h.ch.Sent(), 1)
}

func TestBurstIndependentOrUnsureGetsItsOwnTurn(t *testing.T) {
	t.Parallel()
	m := newBlockingModel(label("supplement", 0.5), label("independent", 0.99))
	h := newHarness(t, m.Model, nil)
	first := h.say(dmAlice, alice, "how's the weather")
	<-m.started
	second := h.say(dmAlice, alice, "also, what time is it") // unsure supplement: below 0.70
	<-m.started
	m.release <- struct{}{}
	m.release <- struct{}{}
	require.Equal(t, outcome.Replied, h.outcome(first).Code)
	require.Equal(t, outcome.Replied, h.outcome(second).Code)
	require.Len(t, h.ch.Sent(), 2)
}

func TestBurstSealedTurnIsSupersededByTheNewerOne(t *testing.T) {
	t.Parallel()
	m := newBlockingModel(label("supplement", 0.9), label("correction", 0.9), label("supplement", 0.9))
	h := newHarness(t, m.Model, nil)
	first := h.say(dmAlice, alice, "book a table")
	<-m.started
	m2 := h.say(dmAlice, alice, "for two")
	require.Equal(t, outcome.MergedIntoReply, h.outcome(m2).Code)
	<-m.started // second generation
	m3 := h.say(dmAlice, alice, "no, for three")
	require.Equal(t, outcome.MergedIntoReply, h.outcome(m3).Code)
	<-m.started // third generation: the turn is sealed now
	m4 := h.say(dmAlice, alice, "at 8pm")
	newer := <-m.started // m4's own turn, answering the sealed turn's messages too
	require.Contains(t, newer, "book a table")
	require.Contains(t, newer, "at 8pm")
	require.Equal(t, outcome.SupersededFollowUp, h.outcome(first).Code)
	m.release <- struct{}{}
	require.Equal(t, outcome.Replied, h.outcome(m4).Code)
	require.Len(t, h.ch.Sent(), 1)
}
