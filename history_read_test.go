package persona_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store"
)

// countingHistory counts the Recent reads of a memory.History.
type countingHistory struct {
	memory.History
	reads atomic.Int32
}

func (c *countingHistory) Recent(ctx context.Context, session string, limit int) ([]memory.Entry, error) {
	c.reads.Add(1)
	return c.History.Recent(ctx, session, limit)
}

// A direct turn reads the transcript once: the review's transcript and the
// prompt's history come from the same read.
func TestDirectTurnReadsHistoryOnce(t *testing.T) {
	t.Parallel()
	hist := &countingHistory{}
	h, model := notedHarness(t, func(db *store.DB) memory.History {
		hist.History = db
		return hist
	})
	for i := range 3 {
		before := hist.reads.Load()
		ev := h.say(dmAlice, alice, fmt.Sprintf("message number %d", i))
		require.Equal(t, outcome.Replied, h.outcome(ev).Code)
		require.EqualValues(t, 1, hist.reads.Load()-before, "turn %d", i)
	}
	prompt := lastPrompt(model)
	require.Contains(t, prompt, "message number 1", "the earlier turns are in the prompt")
	require.Contains(t, prompt, "noted")
}

// notedHarness is a harness whose model answers every message with
// "noted" and whose History is wrap(the store).
func notedHarness(t *testing.T, wrap func(*store.DB) memory.History) (*harness, *agenttest.Model) {
	t.Helper()
	model := agenttest.New()
	model.Otherwise(agenttest.Reply("noted"))
	h := newHarness(t, model, func(o *persona.Options) { o.History = wrap(o.DB.(*store.DB)) })
	return h, model
}

// lastPrompt is the text of the model's last chat request.
func lastPrompt(model *agenttest.Model) string {
	var prompt strings.Builder
	for _, m := range lastChat(model).Messages {
		prompt.WriteString(m.Content)
	}
	return prompt.String()
}

// viewCheckingHistory is the store's History with RecentView, keeping a
// copy of every view it lends so that a test can check afterwards that
// nobody changed a shared window.
type viewCheckingHistory struct {
	*store.DB
	mu            sync.Mutex
	views, copies [][]memory.Entry
}

func (v *viewCheckingHistory) RecentView(ctx context.Context, session string, limit int) ([]memory.Entry, error) {
	out, err := v.DB.RecentView(ctx, session, limit)
	v.mu.Lock()
	v.views, v.copies = append(v.views, out), append(v.copies, slices.Clone(out))
	v.mu.Unlock()
	return out, err
}

// The pipeline reads history through memory.RecentViewer when the History
// has it, and leaves the lent windows as they were: they are the store's
// cache, shared with every other reader.
func TestTurnsLeaveSharedHistoryUnchanged(t *testing.T) {
	t.Parallel()
	hist := &viewCheckingHistory{}
	h, model := notedHarness(t, func(db *store.DB) memory.History {
		hist.DB = db
		return hist
	})
	for i := range 4 {
		ev := h.say(dmAlice, alice, fmt.Sprintf("message number %d", i))
		require.Equal(t, outcome.Replied, h.outcome(ev).Code)
		// A message said later than the one answered is in the window but
		// not context: the turn must skip it, not cut it out of the window.
		h.say(dmAlice, alice, fmt.Sprintf("afterthought %d", i), chantest.WithTime(h.clk.Now().Add(time.Hour)))
	}
	hist.mu.Lock()
	defer hist.mu.Unlock()
	require.NotEmpty(t, hist.views, "the turns read through RecentView")
	for i := range hist.views {
		require.Equal(t, hist.copies[i], hist.views[i], "view %d was changed", i)
	}
	require.Contains(t, lastPrompt(model), "message number 2")
}
