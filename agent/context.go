package agent

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// Layer is the position of a block in the request. Layers up to
// LayerHistory form the stable prefix before the cache breakpoint; the rest
// change every turn.
type Layer int

// The layers, in request order.
const (
	LayerHead         Layer = iota + 1 // persona, fixed rules, tool rules
	LayerSummary                       // summary checkpoint
	LayerHistory                       // stable history
	LayerTurn                          // per-turn blocks (after the breakpoint)
	LayerCandidates                    // same-turn candidates
	LayerDependencies                  // dependency images
	LayerTail                          // system tail: the speaker line
	LayerClock                         // trusted clock
	LayerDecoration                    // quote/mention rules
	LayerCurrent                       // the current message
)

// Stable reports whether blocks of the layer belong to the cached prefix.
func (l Layer) Stable() bool { return l <= LayerHistory }

// Standard block names. An Extra block with one of these names replaces the
// standard block.
const (
	BlockHead            = "system_head"
	BlockSummary         = "summary"
	BlockHistory         = "history"
	BlockPluginContext   = "plugin_context"
	BlockSessionState    = "session_state"
	BlockCoreMemory      = "core_memory"
	BlockMemory          = "memory"
	BlockNotebook        = "notebook"
	BlockWorldBook       = "world_book"
	BlockSelfNotes       = "self_notes"
	BlockMediaIndex      = "media_index"
	BlockRecentSources   = "recent_sources"
	BlockRecentToolCalls = "recent_tool_calls"
	BlockCandidates      = "candidates"
	BlockDependencies    = "dependency_images"
	BlockSpeaker         = "speaker"
	BlockClock           = "clock"
	BlockDecoration      = "decoration"
	BlockCurrent         = "current"
)

// PriorityRequired marks a block that is never trimmed (the system head and
// the current message, whose text is shortened as the very last resort).
const PriorityRequired = 1000

// Default block priorities: when the prompt is over budget, units of the
// lowest-priority block go first.
const (
	PriorityClock           = 900
	PrioritySpeaker         = 900
	PriorityDecoration      = 800
	PriorityHistory         = 700
	PrioritySummary         = 650
	PriorityCoreMemory      = 600
	PriorityCandidates      = 550
	PriorityRecentToolCalls = 500
	PriorityDependencies    = 450
	PriorityMemory          = 400
	PrioritySessionState    = 400
	PriorityPluginContext   = 350
	PriorityNotebook        = 300
	PriorityWorldBook       = 250
	PrioritySelfNotes       = 200
	PriorityMediaIndex      = 150
	PriorityRecentSources   = 100
)

// DefaultDecorationRules tell the model how to quote and mention (rendered
// after the clock, before the current message).
const DefaultDecorationRules = `Quote a message: [persona-reply:m_…]. Mention someone: [persona-at:u_…]. Only ids shown above.`

// Unit is the smallest piece the budget removes: a history turn, one memory
// snippet, a tool call with its result. A unit is kept or dropped whole.
type Unit struct {
	// Text is one line of the block's text message (joined with "\n" after
	// the block's Title).
	Text string
	// Parts are images attached to the block's text message.
	Parts []Part
	// Messages are rendered verbatim after the block's text message (a
	// history turn, a tool call and its result).
	Messages []Message
	// Tokens is the unit's size; 0 means estimate it.
	Tokens int
}

// Block is one typed, named part of the request. The builder renders a
// block as one message of Role holding Title and the Text lines (with the
// Parts), followed by the units' Messages.
type Block struct {
	Name  string
	Layer Layer
	// Priority decides trimming: lower goes first; PriorityRequired is never
	// trimmed.
	Priority int
	// Role of the text message (RoleSystem when empty).
	Role Role
	// Title is the first line of the text message (omitted when empty).
	Title string
	Units []Unit
	// MaxTokens caps the block on its own (0: no cap); units are dropped
	// from the end (from the start with TrimOldest).
	MaxTokens int
	// TrimOldest drops units from the start instead of the end (history).
	TrimOldest bool
}

// ChatMessage is one chat message as the prompt shows it. Ids are platform
// ids; the builder renders them only through the Aliaser.
type ChatMessage struct {
	ID         string
	SenderID   string
	SenderName string
	// FromBot marks the bot's own messages (rendered as assistant turns).
	FromBot bool
	Time    time.Time
	// Segments, when set, are rendered (mentions and quotes by alias);
	// otherwise Text is.
	Segments []channel.Segment
	Text     string
	// ReplyTo is the id of the quoted message ("" = none); on the bot's own
	// messages, the message its reply quoted. The request shows the quote
	// only when it shows the quoted message (otherwise "replying to an
	// earlier message", or no marker on the bot's messages).
	ReplyTo string
	// Parts are the message's images (used for the current message and
	// same-turn candidates; history shows placeholders).
	Parts []Part
	// Transcript is a voice message's transcript.
	Transcript string
}

// ChatMessageFromEvent converts a normalised event.
func ChatMessageFromEvent(ev *channel.Event, fromBot bool) ChatMessage {
	return ChatMessage{
		ID: ev.MessageID, SenderID: ev.Sender.ID, SenderName: ev.Sender.Name,
		FromBot: fromBot || ev.Kind == channel.KindSelf, Time: ev.Time,
		Segments: ev.Segments, ReplyTo: ev.QuoteID(),
	}
}

// ToolExchange is one earlier tool call with its result (the recent tool
// calls block); it is one unit.
type ToolExchange struct {
	Name      string
	Arguments string
	Result    string
}

// Speaker describes who sent the current message (the system tail).
type Speaker struct {
	ID   string
	Name string
	Role channel.Role
	// Owner marks the bot's owner.
	Owner bool
	// Aliases are the bot's names the message matched (rendered "…
	// called you Mira and 米拉").
	Aliases []string
}

// ContextInput is everything one turn's request is built from. Text fields
// may contain known user ids; they are replaced by aliases.
type ContextInput struct {
	// Persona is the SOUL.md text; Rules the fixed rules (DefaultRules when
	// empty); ToolRules the rules for the registered tools. The three make
	// the system head, which must not change between turns.
	Persona, Rules, ToolRules string
	// Summary is the latest summary checkpoint ("" = none).
	Summary string
	// History is the transcript after the summary watermark, oldest first,
	// without the current message. Pass everything since the watermark (or
	// at least since HistoryAnchor): the builder chooses the window.
	History []ChatMessage
	// HistoryAnchor is Assembled.HistoryAnchor of the session's previous
	// turn ("" = the first message of History). The window starts there
	// and only moves forward by whole epochs.
	HistoryAnchor string
	// Chat is the conversation (its id is aliased).
	Chat channel.Chat
	// BotID is the bot's own platform id in the chat; the system tail
	// tells the model which alias is itself ("You are u_… in this
	// group."). It is registered as a known user before the history.
	BotID string
	// Per-turn blocks, one unit per element, rendered in this order. Each
	// element is one complete item (a fact, a snippet, a note) without
	// bullet or title: a block has one title and renders every item as
	// one "- " line (a leading "- ", "* " or "• " is taken off, line
	// breaks inside an item are joined with spaces, blank items are left
	// out). Memory holds the recalled facts and snippets this way.
	PluginContext   []string
	SessionState    []string
	CoreMemory      []string
	Memory          []string
	Notebook        []string
	WorldBook       []string
	SelfNotes       []string
	MediaIndex      []string
	RecentSources   []string
	RecentToolCalls []ToolExchange
	// Candidates are same-turn companions (merged or proactive).
	Candidates []ChatMessage
	// DependencyImages are quoted or referenced images the current message
	// depends on.
	DependencyImages []Part
	Speaker          Speaker
	// Now is rendered in Zone (UTC when nil); zero omits the clock.
	Now  time.Time
	Zone *time.Location
	// Decoration overrides DefaultDecorationRules; "-" omits the block.
	Decoration string
	// Current is the message being answered.
	Current ChatMessage
	// Extra blocks are added (or replace the standard block of the same
	// name); they are placed after the last block of their layer.
	Extra []Block
	// Aliaser renders ids; nil renders no ids at all.
	Aliaser *Aliaser
}

// ContextConfig configures a ContextBuilder; zero fields take the defaults.
type ContextConfig struct {
	// ContextWindow is the smallest window among the turn's candidate
	// models (DefaultContextWindow).
	ContextWindow int
	// MaxOutput is the output reserve (DefaultMaxOutput).
	MaxOutput int
	// MaxInputChars caps the current message's text (DefaultMaxInputChars).
	MaxInputChars int
	// TurnGrouping joins same-user messages into one history turn (120 s).
	TurnGrouping time.Duration
	// Counter counts tokens with the provider's tokenizer (nil: the
	// EstimateMessage heuristic).
	Counter TokenCounter
	// Edit, when set, may add, remove, reorder or replace blocks before
	// rendering (after Extra was applied).
	Edit func(blocks []Block) []Block
	// HistoryCache is the number of sessions whose last rendered history
	// the builder keeps, so that the next turn renders only the new
	// messages (DefaultHistoryCache; negative: none). The request is the
	// same with and without it.
	HistoryCache int
}

// ContextBuilder assembles requests: blocks in layer order (stable prefix
// first), trimmed to the token budget. It is safe for
// concurrent use; per-session state (the history anchor, the previous
// prefix) is passed in and returned. The only state it keeps is a cache of
// each session's last rendered history (ContextConfig.HistoryCache), which
// never changes a request.
type ContextBuilder struct {
	cfg    ContextConfig
	budget Budget
	hist   *historyCache
	// blockBufs holds the block slices of finished builds (*[]Block).
	blockBufs sync.Pool
}

// NewContextBuilder returns a builder for cfg.
func NewContextBuilder(cfg ContextConfig) *ContextBuilder {
	cfg.MaxInputChars = cmp.Or(cfg.MaxInputChars, DefaultMaxInputChars)
	cfg.TurnGrouping = cmp.Or(cfg.TurnGrouping, DefaultTurnGrouping*time.Second)
	return &ContextBuilder{cfg: cfg, budget: NewBudget(cfg.ContextWindow, cfg.MaxOutput), hist: newHistoryCache(cfg.HistoryCache)}
}

// Budget returns the builder's token budget.
func (b *ContextBuilder) Budget() Budget { return b.budget }

// Assembled is a built request.
type Assembled struct {
	// Messages in request order; the last stable message carries
	// CacheBreakpoint.
	Messages []Message
	// PrefixLen is the number of messages before the breakpoint (the stable
	// prefix); HeadLen the number of system-head messages (a second
	// breakpoint where the provider allows two).
	PrefixLen, HeadLen int
	// PrefixHash is the hex SHA-256 of the prefix's canonical bytes
	// (PromptBytes).
	PrefixHash string
	// SummaryHash identifies the summary checkpoint rendered.
	SummaryHash string
	// HistoryAnchor is the id of the first history message kept; store it
	// and pass it as the next turn's ContextInput.HistoryAnchor.
	HistoryAnchor string
	// EpochAdvanced is set when the history window moved this turn (the
	// prefix legitimately changed).
	EpochAdvanced bool
	// HistoryTurns and DroppedTurns count the history turns kept and left
	// out of the window.
	HistoryTurns, DroppedTurns int
	// Tokens is the estimated input size.
	Tokens int
	Budget Budget
	// Trimmed counts the units removed per block by the budget.
	Trimmed map[string]int
	// TruncatedCurrent is set when the current message's text was cut.
	TruncatedCurrent bool

	prefix []byte
}

// Request returns a Request for purpose with the assembled messages.
func (a *Assembled) Request(purpose string) Request {
	return Request{Purpose: purpose, Messages: a.Messages}
}

// PrefixBytes returns the canonical bytes of the stable prefix.
func (a *Assembled) PrefixBytes() []byte { return a.prefix }

// HasImages reports whether any message carries image parts.
func (a *Assembled) HasImages() bool { return hasImages(a.Messages) }

func hasImages(msgs []Message) bool {
	for i := range msgs {
		if len(msgs[i].Parts) > 0 {
			return true
		}
	}
	return false
}

// Build assembles one turn's request.
//
// Blocks are rendered in an order of their own, then placed in request
// order: the head; the history (which first registers the bot's id, then
// its participants and messages); the summary; the candidates,
// the current message and the speaker (registering the turn's
// participants); then the per-turn blocks, so that the known user ids typed
// in any text field are replaced alike wherever the participant appears.
func (b *ContextBuilder) Build(in ContextInput) *Assembled {
	r := renderer{al: in.Aliaser}
	asm := &Assembled{Budget: b.budget}

	head := b.headBlock(&in)
	th := threads{curID: in.Current.ID, curBot: in.Current.FromBot}
	hist := b.historyBlock(&in, &r, asm, &th)
	var summary Block
	if s := strings.TrimSpace(in.Summary); s != "" {
		summary = Block{Name: BlockSummary, Layer: LayerSummary, Priority: PrioritySummary,
			Title: "[Summary of the earlier conversation]", Units: lineUnits(splitLines(s), r.text),
			MaxTokens: b.budget.Summary}
		sum := sha256.Sum256([]byte(s))
		asm.SummaryHash = hex.EncodeToString(sum[:8])
	}
	// The turn's participants first: ids typed in the candidates are
	// aliased like those typed in the current message.
	r.alias(AliasUser, in.Speaker.ID)
	r.users(&in.Current)
	for i := range in.Candidates {
		r.users(&in.Candidates[i])
	}
	cands, hasCands := b.candidatesBlock(&in, &r, &th)
	cur := b.currentBlock(&in, &r, asm, &th)
	speaker := b.speakerText(&in, &r)

	bp, _ := b.blockBufs.Get().(*[]Block)
	if bp == nil {
		bp = &[]Block{}
	}
	blocks := append(slices.Grow((*bp)[:0], 20), head)
	if len(summary.Units) > 0 {
		blocks = append(blocks, summary)
	}
	if len(hist.Units) > 0 {
		blocks = append(blocks, hist)
	}
	blocks = b.turnBlocks(blocks, &in, &r)
	if hasCands {
		blocks = append(blocks, cands)
	}
	if len(in.DependencyImages) > 0 {
		units := make([]Unit, 0, len(in.DependencyImages))
		for _, p := range in.DependencyImages {
			units = append(units, Unit{Parts: []Part{p}})
		}
		blocks = append(blocks, Block{Name: BlockDependencies, Layer: LayerDependencies, Priority: PriorityDependencies,
			Role: RoleUser, Title: "[Images the current message refers to]", Units: units})
	}
	blocks = b.tailBlocks(blocks, &in, speaker)
	blocks = append(blocks, cur)
	th.curUnit = &blocks[len(blocks)-1].Units[0]

	for _, x := range in.Extra {
		blocks = placeBlock(blocks, x)
	}
	if b.cfg.Edit != nil {
		blocks = b.cfg.Edit(blocks)
	}
	slices.SortStableFunc(blocks, func(x, y Block) int { return cmp.Compare(x.Layer, y.Layer) })

	b.measure(blocks)
	b.trim(blocks, asm, func() bool { return b.fixRefs(blocks, &in, &r, &th, asm) })
	b.render(blocks, asm)
	if b.cfg.Edit == nil { // Edit may keep the blocks
		clear(blocks)
		*bp = blocks[:0]
		b.blockBufs.Put(bp)
	}
	return asm
}

// placeBlock replaces the block named x.Name, or inserts x after the last
// block of its layer.
func placeBlock(blocks []Block, x Block) []Block {
	for i := range blocks {
		if blocks[i].Name == x.Name {
			blocks[i] = x
			return blocks
		}
	}
	at := len(blocks)
	for i := range blocks {
		if blocks[i].Layer > x.Layer {
			at = i
			break
		}
	}
	return slices.Insert(blocks, at, x)
}

func (b *ContextBuilder) headBlock(in *ContextInput) Block {
	rules := cmp.Or(in.Rules, DefaultRules)
	var sb strings.Builder
	if p := strings.TrimSpace(in.Persona); p != "" {
		sb.WriteString(p)
		sb.WriteString("\n\n")
	}
	sb.WriteString(strings.TrimSpace(rules))
	if tr := strings.TrimSpace(in.ToolRules); tr != "" {
		sb.WriteString("\n\n")
		sb.WriteString(tr)
	}
	return Block{Name: BlockHead, Layer: LayerHead, Priority: PriorityRequired, Units: []Unit{{Text: sb.String()}}}
}

// splitLines splits s into non-empty lines.
func splitLines(s string) []string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.TrimSpace(line) != "" {
			out = append(out, line)
		}
	}
	return out
}

func lineUnits(lines []string, f func(string) string) []Unit {
	if len(lines) == 0 {
		return nil
	}
	units := make([]Unit, 0, len(lines))
	for _, l := range lines {
		units = append(units, Unit{Text: f(l)})
	}
	return units
}

// item returns a per-turn block's item as one flat line: trimmed, without
// a leading list marker, its line breaks joined with spaces ("" when
// blank).
func item(s string) string {
	s = strings.TrimSpace(s)
	if s != "" && (s[0] == '-' || s[0] == '*' || s[0] == 0xe2) { // "•" is e2 80 a2
		for _, mark := range [...]string{"-", "*", "•"} {
			if rest, ok := strings.CutPrefix(s, mark); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
				s = strings.TrimSpace(rest)
				break
			}
		}
	}
	if strings.IndexByte(s, '\n') < 0 && strings.IndexByte(s, '\r') < 0 {
		return s
	}
	var sb strings.Builder
	sb.Grow(len(s))
	for l := range strings.FieldsFuncSeq(s, func(c rune) bool { return c == '\n' || c == '\r' }) {
		if l = strings.TrimSpace(l); l != "" {
			if sb.Len() > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(l)
		}
	}
	return sb.String()
}

// bulletUnits renders items as "- " lines, one unit each, with known user
// ids aliased; blank items are left out.
func bulletUnits(items []string, r *renderer) []Unit {
	var units []Unit
	for _, s := range items {
		if s = item(s); s == "" {
			continue
		}
		if units == nil {
			units = make([]Unit, 0, len(items))
		}
		units = append(units, Unit{Text: "- " + r.text(s)})
	}
	return units
}

// turnBlocks appends the per-turn blocks to out: each has one title and
// one "- " line per item (see ContextInput).
func (b *ContextBuilder) turnBlocks(out []Block, in *ContextInput, r *renderer) []Block {
	type spec struct {
		name, title string
		prio, max   int
		items       []string
	}
	specs := [...]spec{
		{BlockPluginContext, "[Plugin context]", PriorityPluginContext, 0, in.PluginContext},
		{BlockSessionState, "[Session state]", PrioritySessionState, 0, in.SessionState},
		{BlockCoreMemory, "[Key facts]", PriorityCoreMemory, b.budget.CoreMemory, in.CoreMemory},
		{BlockMemory, "[Memory, may be outdated]", PriorityMemory, b.budget.Memory, in.Memory},
		{BlockNotebook, "[Notebook]", PriorityNotebook, 0, in.Notebook},
		{BlockWorldBook, "[World book]", PriorityWorldBook, 0, in.WorldBook},
		{BlockSelfNotes, "[Your notes to self]", PrioritySelfNotes, 0, in.SelfNotes},
		{BlockMediaIndex, "[Media in this chat]", PriorityMediaIndex, 0, in.MediaIndex},
		{BlockRecentSources, "[Recent sources]", PriorityRecentSources, 0, in.RecentSources},
	}
	for _, s := range specs {
		if units := bulletUnits(s.items, r); len(units) > 0 {
			out = append(out, Block{Name: s.name, Layer: LayerTurn, Priority: s.prio, Title: s.title,
				Units: units, MaxTokens: s.max})
		}
	}
	if len(in.RecentToolCalls) > 0 {
		units := make([]Unit, 0, len(in.RecentToolCalls))
		for _, tc := range in.RecentToolCalls {
			units = append(units, Unit{Text: "- " + r.text(item(tc.Name+" "+tc.Arguments)) + " → " + r.text(item(tc.Result))})
		}
		out = append(out, Block{Name: BlockRecentToolCalls, Layer: LayerTurn, Priority: PriorityRecentToolCalls,
			Title: "[Your recent tool calls]", Units: units})
	}
	return out
}

// candidatesBlock renders the same-turn candidates; their quotes are
// resolved among the shown history, the candidates and the current
// message.
func (b *ContextBuilder) candidatesBlock(in *ContextInput, r *renderer, th *threads) (Block, bool) {
	th.cands = in.Candidates
	if len(in.Candidates) == 0 {
		return Block{}, false
	}
	units := make([]Unit, 0, len(in.Candidates))
	th.candRefs = make([]refKind, len(in.Candidates))
	for i := range in.Candidates {
		c := &in.Candidates[i]
		th.candRefs[i] = th.find(c.ReplyTo, i)
		units = append(units, Unit{Text: r.line(c, th.candRefs[i]), Parts: c.Parts})
	}
	th.candUnits = units
	return Block{Name: BlockCandidates, Layer: LayerCandidates, Priority: PriorityCandidates, Role: RoleUser,
		Title: "[Same turn]", Units: units}, true
}

// speakerText renders the system tail: which alias is the bot, the chat,
// and who sent the current message (and which of the bot's names they
// used).
func (b *ContextBuilder) speakerText(in *ContextInput, r *renderer) string {
	var sb strings.Builder
	bot := r.alias(AliasUser, in.BotID)
	switch in.Chat.Kind {
	case channel.Group:
		if bot != "" {
			sb.WriteString("You are " + bot + " in this group")
		} else {
			sb.WriteString("This is a group chat")
		}
		if g := r.alias(AliasGroup, in.Chat.ID); g != "" {
			sb.WriteString(" (" + g + ")")
		}
		sb.WriteString(".\n")
	case channel.Private:
		if bot != "" {
			sb.WriteString("You are " + bot + " in this private chat.\n")
		} else {
			sb.WriteString("This is a private chat.\n")
		}
	default:
		if bot != "" {
			sb.WriteString("You are " + bot + " in this chat.\n")
		}
	}
	sb.WriteString("Speaker: ")
	sb.WriteString(r.name(in.Speaker.ID, in.Speaker.Name))
	switch role := in.Speaker.Role; role {
	case "", channel.RoleMember:
	case channel.RoleOwner, channel.RoleAdmin:
		sb.WriteString(", group " + string(role))
	default:
		sb.WriteString(", " + r.text(string(role)))
	}
	if in.Speaker.Owner {
		sb.WriteString(", your owner")
	}
	sb.WriteByte('.')
	var names []string
	for _, a := range in.Speaker.Aliases {
		if a = strings.TrimSpace(r.text(a)); a != "" && !slices.Contains(names, a) {
			names = append(names, a)
		}
	}
	for i, n := range names {
		switch {
		case i == 0:
			sb.WriteString(" They called you ")
		case i == len(names)-1:
			sb.WriteString(" and ")
		default:
			sb.WriteString(", ")
		}
		sb.WriteString(n)
	}
	if len(names) > 0 {
		sb.WriteByte('.')
	}
	return sb.String()
}

// tailBlocks appends the speaker, clock and decoration blocks to out.
func (b *ContextBuilder) tailBlocks(out []Block, in *ContextInput, speaker string) []Block {
	out = append(out, Block{Name: BlockSpeaker, Layer: LayerTail, Priority: PrioritySpeaker, Units: []Unit{{Text: speaker}}})
	if !in.Now.IsZero() {
		zone := cmp.Or(in.Zone, time.UTC)
		out = append(out, Block{Name: BlockClock, Layer: LayerClock, Priority: PriorityClock,
			Units: []Unit{{Text: "Now: " + in.Now.In(zone).Format("Mon 2006-01-02 15:04 MST")}}})
	}
	if dec := cmp.Or(in.Decoration, DefaultDecorationRules); dec != "-" {
		out = append(out, Block{Name: BlockDecoration, Layer: LayerDecoration, Priority: PriorityDecoration, Units: []Unit{{Text: dec}}})
	}
	return out
}

func (b *ContextBuilder) currentBlock(in *ContextInput, r *renderer, asm *Assembled, th *threads) Block {
	th.curRef = th.find(in.Current.ReplyTo, selfCurrent)
	return Block{Name: BlockCurrent, Layer: LayerCurrent, Priority: PriorityRequired, Role: RoleUser,
		Units: []Unit{{Text: b.currentLine(in, r, th.curRef, asm), Parts: in.Current.Parts}}}
}

// currentLine renders the current message with its quote resolved as ref.
func (b *ContextBuilder) currentLine(in *ContextInput, r *renderer, ref refKind, asm *Assembled) string {
	cur := &in.Current
	header := r.header(cur, ref)
	text := r.body(cur, false)
	if n := utf8.RuneCountInString(text); n > b.cfg.MaxInputChars {
		text = clipRunes(text, b.cfg.MaxInputChars) + "…"
		asm.TruncatedCurrent = true
	}
	var sb strings.Builder
	sb.Grow(len("[current] ") + len(header) + 1 + len(text) + len(cur.Transcript) + 24)
	sb.WriteString("[current] ")
	sb.WriteString(header)
	if text != "" {
		sb.WriteByte(' ')
		sb.WriteString(text)
	}
	if t := strings.TrimSpace(cur.Transcript); t != "" {
		sb.WriteString("\n[voice transcript] ")
		sb.WriteString(r.text(clipRunes(t, b.cfg.MaxInputChars)))
	}
	return sb.String()
}

func clipRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// measure fills in the unit token estimates.
func (b *ContextBuilder) measure(blocks []Block) {
	for bi := range blocks {
		units := blocks[bi].Units
		for ui := range units {
			u := &units[ui]
			if u.Tokens > 0 {
				continue
			}
			u.Tokens = b.unitTokens(u)
		}
	}
}

func (b *ContextBuilder) unitTokens(u *Unit) int {
	n := 0
	if u.Text != "" || len(u.Parts) > 0 {
		if b.cfg.Counter != nil {
			n += b.cfg.Counter.CountTokens(Message{Content: u.Text, Parts: u.Parts}) - MessageOverheadTokens
		} else {
			n += EstimateTokens(u.Text) + 1
			for _, p := range u.Parts {
				n += EstimateMessage(Message{Parts: []Part{p}}) - MessageOverheadTokens
			}
		}
	}
	for i := range u.Messages {
		if b.cfg.Counter != nil {
			n += b.cfg.Counter.CountTokens(u.Messages[i])
		} else {
			n += EstimateMessage(u.Messages[i])
		}
	}
	return max(n, 1)
}

// blockTokens is the size of a block as rendered: its units plus the text
// message's overhead and title.
func blockTokens(bl *Block) int {
	n, text := 0, false
	for i := range bl.Units {
		n += bl.Units[i].Tokens
		if bl.Units[i].Text != "" || len(bl.Units[i].Parts) > 0 {
			text = true
		}
	}
	if text {
		n += MessageOverheadTokens + EstimateTokens(bl.Title)
	}
	return n
}

// trim applies the block caps, then removes units by ascending priority
// until the request fits the input budget; the current message's text is
// shortened last. When units went, fix renders again the quotes of
// messages that are no longer shown (and trimming goes on if that made the
// request larger).
func (b *ContextBuilder) trim(blocks []Block, asm *Assembled, fix func() bool) {
	drop := func(bl *Block) {
		if bl.TrimOldest {
			bl.Units = bl.Units[1:]
		} else {
			bl.Units = bl.Units[:len(bl.Units)-1]
		}
		if asm.Trimmed == nil {
			asm.Trimmed = make(map[string]int)
		}
		asm.Trimmed[bl.Name]++
	}
	total := 0
	for i := range blocks {
		bl := &blocks[i]
		if bl.MaxTokens > 0 && bl.Priority < PriorityRequired {
			for len(bl.Units) > 0 && blockTokens(bl) > bl.MaxTokens {
				drop(bl)
			}
		}
		total += blockTokens(bl)
	}
	if total > b.budget.Input {
		// Pictures first cost less (low detail) before anything goes.
		total = b.lowerDetail(blocks, total)
	}
	var order []int
	for {
		if total > b.budget.Input {
			if order == nil {
				order = make([]int, 0, len(blocks))
				for i := range blocks {
					if blocks[i].Priority < PriorityRequired {
						order = append(order, i)
					}
				}
				slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(blocks[x].Priority, blocks[y].Priority) })
			}
			for _, i := range order {
				bl := &blocks[i]
				for total > b.budget.Input && len(bl.Units) > 0 {
					before := blockTokens(bl)
					drop(bl)
					total -= before - blockTokens(bl)
					if bl.Name == BlockHistory {
						asm.HistoryTurns--
						asm.DroppedTurns++
					}
				}
				if total <= b.budget.Input {
					break
				}
			}
		}
		if fix == nil || (asm.Trimmed == nil && b.cfg.Edit == nil) || !fix() {
			break
		}
		total = 0
		for i := range blocks {
			total += blockTokens(&blocks[i])
		}
		if total <= b.budget.Input {
			break
		}
	}
	if total > b.budget.Input {
		// Only required blocks are left: shorten the current message.
		for i := range blocks {
			bl := &blocks[i]
			if bl.Name != BlockCurrent || len(bl.Units) == 0 {
				continue
			}
			u := &bl.Units[0]
			over := total - b.budget.Input
			keep := max(utf8.RuneCountInString(u.Text)-over*3, 0)
			u.Text = clipRunes(u.Text, keep)
			asm.TruncatedCurrent = true
			total -= u.Tokens
			u.Tokens = EstimateTokens(u.Text) + 1
			total += u.Tokens
		}
	}
	asm.Tokens = total
}

// lowerDetail asks for every picture in low detail and returns the new
// total. The parts are copied: the caller's slices are not changed.
func (b *ContextBuilder) lowerDetail(blocks []Block, total int) int {
	for i := range blocks {
		units := blocks[i].Units
		for j := range units {
			u := &units[j]
			high := false
			for _, p := range u.Parts {
				high = high || p.Detail != "low"
			}
			if !high {
				continue
			}
			parts := slices.Clone(u.Parts)
			for k := range parts {
				parts[k].Detail = "low"
			}
			before := blockTokens(&blocks[i])
			u.Parts, u.Tokens = parts, 0
			u.Tokens = b.unitTokens(u)
			total += blockTokens(&blocks[i]) - before
		}
	}
	return total
}

// render turns blocks into messages, places the breakpoint and hashes the
// prefix.
func (b *ContextBuilder) render(blocks []Block, asm *Assembled) {
	n := 0
	for i := range blocks {
		n += 1
		for _, u := range blocks[i].Units {
			n += len(u.Messages)
		}
	}
	msgs := make([]Message, 0, n)
	prefixLen := 0
	var sb strings.Builder
	for i := range blocks {
		bl := &blocks[i]
		if len(bl.Units) == 0 {
			continue
		}
		sb.Reset()
		size := len(bl.Title)
		for _, u := range bl.Units {
			size += len(u.Text) + 1
		}
		sb.Grow(size)
		var parts []Part
		if bl.Title != "" {
			sb.WriteString(bl.Title)
		}
		for _, u := range bl.Units {
			if u.Text != "" {
				if sb.Len() > 0 {
					sb.WriteByte('\n')
				}
				sb.WriteString(u.Text)
			}
			parts = append(parts, u.Parts...)
		}
		if hasText := sb.Len() > len(bl.Title) || len(parts) > 0; hasText {
			msgs = append(msgs, Message{Role: cmp.Or(bl.Role, RoleSystem), Content: sb.String(), Parts: parts})
		}
		for _, u := range bl.Units {
			msgs = append(msgs, u.Messages...)
		}
		if bl.Layer == LayerHead {
			asm.HeadLen = len(msgs)
		}
		if bl.Layer.Stable() {
			prefixLen = len(msgs)
		}
	}
	if prefixLen > 0 {
		msgs[prefixLen-1].CacheBreakpoint = true
	}
	asm.Messages = msgs
	asm.PrefixLen = prefixLen
	asm.prefix = AppendPromptBytes(make([]byte, 0, promptBytesLen(msgs[:prefixLen])), msgs[:prefixLen])
	sum := sha256.Sum256(asm.prefix)
	asm.PrefixHash = hex.EncodeToString(sum[:])
}

// promptBytesLen is the length of AppendPromptBytes(nil, msgs).
func promptBytesLen(msgs []Message) int {
	n := 0
	for i := range msgs {
		m := &msgs[i]
		n += len(m.Role) + len(m.Name) + len(m.Content) + 3
		for _, p := range m.Parts {
			n += len(p.ImageURL) + len(p.Detail) + 2
		}
		for _, tc := range m.ToolCalls {
			n += len(tc.ID) + len(tc.Name) + len(tc.Arguments) + 3
		}
		if m.ToolCallID != "" {
			n += 1 + len(m.ToolCallID)
		}
	}
	return n
}

// AppendPromptBytes appends the canonical bytes of msgs to dst: what an
// upstream prefix cache sees (role, name, content, parts, tool calls; the
// CacheBreakpoint flag is not part of it). Two requests share a cached
// prefix as far as their canonical bytes agree.
func AppendPromptBytes(dst []byte, msgs []Message) []byte {
	for i := range msgs {
		m := &msgs[i]
		dst = append(dst, m.Role...)
		dst = append(dst, 0)
		dst = append(dst, m.Name...)
		dst = append(dst, 0)
		dst = append(dst, m.Content...)
		for _, p := range m.Parts {
			dst = append(dst, 1)
			dst = append(dst, p.ImageURL...)
			dst = append(dst, 0)
			dst = append(dst, p.Detail...)
		}
		for _, tc := range m.ToolCalls {
			dst = append(dst, 2)
			dst = append(dst, tc.ID...)
			dst = append(dst, 0)
			dst = append(dst, tc.Name...)
			dst = append(dst, 0)
			dst = append(dst, tc.Arguments...)
		}
		if m.ToolCallID != "" {
			dst = append(dst, 3)
			dst = append(dst, m.ToolCallID...)
		}
		dst = append(dst, 0x1e)
	}
	return dst
}
