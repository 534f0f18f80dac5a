package agent

import (
	"slices"
	"sync"
	"sync/atomic"
)

// DefaultHistoryCache is the number of sessions whose last rendered history
// a ContextBuilder keeps by default (ContextConfig.HistoryCache).
const DefaultHistoryCache = 256

// A session's next turn renders the same history messages again, plus the
// few that arrived since: the window only moves by whole epochs, so that
// the prompt prefix stays byte-identical. historyCache keeps, per session
// (alias secret), the messages the last turn rendered with their rendered
// form, their token counts and the alias registrations each made, so the
// next turn registers those again and renders only what is new.
//
// A message renders the same whenever it is the same message (every field
// renderer.message reads, see sameRendered), the messages before it are the
// same (its quote is resolved among them, see histRef) and the Aliaser is
// in the same state when its rendering starts: the aliases it registers
// come out the same (Aliaser.replay checks each), and the ids Text replaces
// are the known users (the same at the start of the history when their
// userMark is; after that the same registrations give the same users). The
// cache reuses only a run of equal messages from the first on, so a reused
// message reads exactly as it would if rendered again.
type historyCache struct {
	max int
	mu  sync.Mutex
	m   map[string]*historyRender
}

// historyRender is one turn's rendered history: msgs[i] rendered as out[i],
// tokens[i] tokens, with registrations regs[i]. Its first len(msgs)
// elements never change; one successor (the first to claim it) may append
// its new messages in place, behind them.
type historyRender struct {
	start userMark // the Aliaser's users before the first message
	// bot is the bot's id, registered before the first message.
	bot string
	// after, when the Aliaser had nothing registered before the first
	// message, is what it had registered after the last one.
	after   *aliasLayer
	msgs    []ChatMessage
	out     []Message
	tokens  []int
	regs    [][]aliasReg
	claimed atomic.Bool
}

// aliasReg is one registration made while rendering: its kind, id and the
// alias it returned (short: the 8-character form).
type aliasReg struct {
	kind  AliasKind
	short bool
	id    string
	alias string
}

func newHistoryCache(max int) *historyCache {
	if max < 0 {
		return nil
	}
	if max == 0 {
		max = DefaultHistoryCache
	}
	return &historyCache{max: max, m: make(map[string]*historyRender)}
}

func (c *historyCache) get(key string) *historyRender {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

// put stores h. A full cache drops one other session's entry, the first
// the map's (randomly started) iteration yields: with more active sessions
// than room, most sessions keep their entry from one turn to the next,
// where starting over would drop them all at once.
func (c *historyCache) put(key string, h *historyRender) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[key] = h
}

// sameRendered reports whether a and b render alike after equal messages:
// they agree in every field renderer.message and histRef read. (TestSameRenderedCoversChatMessage fails
// when ChatMessage gains a field, so that this list is looked at again.)
func sameRendered(a, b *ChatMessage) bool {
	return a.ID == b.ID && a.SenderID == b.SenderID && a.SenderName == b.SenderName && a.FromBot == b.FromBot &&
		a.Text == b.Text && a.ReplyTo == b.ReplyTo && slices.Equal(a.Segments, b.Segments)
}

// renderHistory registers the bot's id (bot), then renders msgs
// (rendered[i], tokens[i]) with r, reusing the session's last rendering
// where it still holds (see historyCache), and stores this one for the
// next turn. The returned slices may be shared with the cache: the caller
// must not change their elements.
func (b *ContextBuilder) renderHistory(msgs []ChatMessage, bot string, r *renderer) (rendered []Message, tokens []int) {
	if b.hist == nil || r.al == nil {
		r.alias(AliasUser, bot)
		rendered, tokens = make([]Message, len(msgs)), make([]int, len(msgs))
		for i := range msgs {
			rendered[i], tokens[i] = b.renderMessage(r, &msgs[i], histRef(msgs, 0, i), nil)
		}
		return rendered, tokens
	}
	key := string(r.al.secret)
	fresh := r.al.empty()
	next := &historyRender{start: r.al.userMark(), bot: bot}
	done := 0
	if prev := b.hist.get(key); prev != nil && prev.start == next.start && prev.bot == bot {
		same := 0
		for same < min(len(prev.msgs), len(msgs)) && sameRendered(&prev.msgs[same], &msgs[same]) {
			same++
		}
		if fresh && same == len(prev.msgs) && prev.after != nil && r.al.setBase(prev.after) {
			// Every message as before, from the same (empty) start: the
			// registrations (the bot's among them) are exactly those of
			// the last rendering.
			done = same
		} else {
			r.alias(AliasUser, bot)
		}
		hint := 0
		for _, g := range prev.regs[done:same] {
			hint += len(g)
		}
		for done < same && r.al.replay(prev.regs[done], hint) == len(prev.regs[done]) {
			hint = 0
			done++
		}
		if done == len(prev.msgs) && prev.claimed.CompareAndSwap(false, true) {
			// Append behind prev's messages: nobody reads there.
			next.msgs, next.out, next.tokens, next.regs = prev.msgs, prev.out, prev.tokens, prev.regs
		} else {
			n := len(msgs) + 16
			next.msgs = append(make([]ChatMessage, 0, n), prev.msgs[:done]...)
			next.out = append(make([]Message, 0, n), prev.out[:done]...)
			next.tokens = append(make([]int, 0, n), prev.tokens[:done]...)
			next.regs = append(make([][]aliasReg, 0, n), prev.regs[:done]...)
		}
	}
	if next.msgs == nil {
		r.alias(AliasUser, bot)
		// Room for the messages of the next few turns.
		n := len(msgs) + 16
		next.msgs, next.out, next.tokens, next.regs =
			make([]ChatMessage, 0, n), make([]Message, 0, n), make([]int, 0, n), make([][]aliasReg, 0, n)
	}
	for i := done; i < len(msgs); i++ {
		var regs []aliasReg
		out, n := b.renderMessage(r, &msgs[i], histRef(msgs, 0, i), &regs)
		next.msgs = append(next.msgs, msgs[i])
		next.out = append(next.out, out)
		next.tokens = append(next.tokens, n)
		next.regs = append(next.regs, regs)
	}
	if fresh {
		next.after = r.al.freeze()
	}
	b.hist.put(key, next)
	// Full slice expressions: an append by the caller must not write into
	// the cache's arrays.
	return next.out[:len(msgs):len(msgs)], next.tokens[:len(msgs):len(msgs)]
}

// renderMessage renders one history message with its quote resolved as
// ref and counts its tokens; with regs set it records the registrations in
// *regs.
func (b *ContextBuilder) renderMessage(r *renderer, m *ChatMessage, ref refKind, regs *[]aliasReg) (Message, int) {
	r.regs = regs
	msg := r.message(m, ref)
	r.regs = nil
	if b.cfg.Counter != nil {
		return msg, b.cfg.Counter.CountTokens(msg)
	}
	return msg, EstimateMessage(msg)
}
