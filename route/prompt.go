package route

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
)

// routerSystem is the router's system prompt. It never changes, so it is
// the start of every router request's cached prefix.
const routerSystem = `You rate new messages in a group chat for a chat bot. For every candidate message decide two things, each with a reason of one short sentence:

1. relevance.directed — "yes" only if the message is clearly addressed to the bot: it names the bot (see bot.names), mentions the bot, quotes the bot, or directly continues the bot's last message to this speaker. A question to the group in general (also one to @everyone), or talk between other people, is "no". Answer yes or no, never a probability.
2. chat_in.score — a number from 0 to 1: how natural and welcome it would be for the bot to join in now, as a friendly member of the group. Use 0 when someone asks the bot to stop, be quiet or go away, or when the talk is a mechanical loop (bots answering bots, repeated text). Keep it low for private talk between others, small talk that needs no answer, or when the bot spoke a lot recently. Use high scores only when the bot has something useful or fitting to add.

People are shown as aliases (u_…), the same in every request. The bot's own alias is given in bot.speaker: lines with that speaker are the bot's own messages, and @ with that alias mentions the bot. is_bot marks messages written by a bot (this one or another). @everyone mentions the whole group. The transcript is the recent conversation, oldest first; "at" is when a message was sent, in UTC (a time without a date is on the day of the line before it; in bot_last_message and the candidates, on the day of now); reply_to is the speaker of the message a line quoted; media are shown as [image], [voice] and the like, and texts may be shortened. bot_last_message tells when the bot last spoke, whom it addressed and how many messages followed. The candidates are the new messages to rate, and now is the current time. Follow the group's criteria when given.

Answer with only a JSON object, no other text, exactly in this form:
` + OutputSchema + `
Include every candidate exactly once, with its message_id.`

// userIntro starts the user message, before the data.
const userIntro = "Rate the candidates.\n"

// payload is the JSON the router model rates. Its fields are in cache
// order: what stays the same from one rating of a session to the next
// comes first (the bot, the criteria, the transcript, which only grows
// until its window moves by a whole epoch, see windowStart), what changes
// with every rating comes last (bot_last_message counts the messages since
// the bot spoke, the candidates, now). A provider's prefix cache then
// covers everything up to the newest transcript line.
type payload struct {
	Bot        botInfo     `json:"bot"`
	Criteria   string      `json:"criteria,omitempty"`
	Transcript []line      `json:"transcript"`
	BotLast    *botLast    `json:"bot_last_message,omitempty"`
	Candidates []candidate `json:"candidates"`
	Now        string      `json:"now"`
}

type botInfo struct {
	Speaker string   `json:"speaker"`
	Names   []string `json:"names,omitempty"`
}

type botLast struct {
	At            string   `json:"at,omitempty"`
	Addressed     []string `json:"addressed,omitempty"`
	MessagesSince int      `json:"messages_since"`
}

// line is one transcript message. It depends only on its event and the
// lines before it in the window (the date and the name are left out when
// the line before already gave them), so a line renders the same in every
// request that shows it.
type line struct {
	At      string `json:"at,omitempty"`
	Speaker string `json:"speaker"`
	Name    string `json:"name,omitempty"`
	IsBot   bool   `json:"is_bot,omitempty"`
	ReplyTo string `json:"reply_to,omitempty"`
	Text    string `json:"text"`
}

type quoteInfo struct {
	Speaker string `json:"speaker,omitempty"`
	IsBot   bool   `json:"is_bot"`
	Text    string `json:"text,omitempty"`
}

type candidate struct {
	MessageID  string     `json:"message_id"`
	At         string     `json:"at,omitempty"`
	Speaker    string     `json:"speaker"`
	Name       string     `json:"name,omitempty"`
	IsBot      bool       `json:"is_bot"`
	Text       string     `json:"text"`
	Mentions   []string   `json:"mentions,omitempty"`
	Quote      *quoteInfo `json:"quote,omitempty"`
	QuotesBot  bool       `json:"quotes_bot,omitempty"`
	MentionsMe bool       `json:"mentions_bot,omitempty"`
	// AfterBotToSpeaker: the bot's last message addressed this speaker.
	AfterBotToSpeaker bool `json:"bot_last_addressed_speaker,omitempty"`
}

// The time formats of the request: a transcript line gives its date only
// when it differs from the line before's; now always gives it.
const (
	clockLayout = "15:04:05"
	dateLayout  = "2006-01-02 15:04:05"
	nowLayout   = "2006-01-02 15:04:05 MST"
)

// everyone is how a mention of the whole chat (agent.MentionAll) reads.
const everyone = "everyone"

// unknownBot is the bot's speaker when the events do not name the bot's
// account (Event.BotID empty): there is no id to alias.
const unknownBot = "bot"

// renderer renders events for one request through the session's Scope:
// every id becomes the Scope's alias, text typed by people is scrubbed of
// the ids the Scope knows, media are placeholders.
type renderer struct {
	sc       *agent.Scope
	botID    string
	botAlias string
	chars    int
}

func newRenderer(sc *agent.Scope, botID string, chars int) *renderer {
	r := &renderer{sc: sc, botID: botID, botAlias: unknownBot, chars: chars}
	if botID != "" {
		r.botAlias = sc.User(botID)
	}
	return r
}

// user returns the alias of a user id (the bot's alias for the bot, "" for
// none).
func (r *renderer) user(id string) string {
	if id != "" && id == r.botID {
		return r.botAlias
	}
	return r.sc.User(id)
}

// mention returns how a mention of id reads after the "@" ("" for none).
func (r *renderer) mention(id string) string {
	if id == agent.MentionAll {
		return everyone
	}
	return r.user(id)
}

// isSelf reports whether ev is the bot's own message.
func isSelf(ev *channel.Event, botID string) bool {
	return ev.Kind == channel.KindSelf || (botID != "" && ev.Sender.ID == botID)
}

// speaker returns the alias of ev's author.
func (r *renderer) speaker(ev *channel.Event) string {
	if isSelf(ev, r.botID) {
		return r.botAlias
	}
	return r.user(ev.Sender.ID)
}

// clip shortens s to at most n runes, marking a cut with "…".
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// text returns segments as plain text for the model, scrubbed and clipped
// to the transcript length: mentions as @alias (@everyone), media as
// placeholders (never their URLs), spacing collapsed to single spaces.
func (r *renderer) text(segs []channel.Segment) string {
	var b strings.Builder
	for _, s := range segs {
		switch s.Type {
		case channel.SegText:
			b.WriteString(s.Text)
		case channel.SegMention:
			if a := r.mention(s.UserID); a != "" {
				b.WriteString(" @" + a + " ")
			}
		case channel.SegLink:
			if s.Text != "" {
				b.WriteString(" [link: " + s.Text + "] ")
			} else {
				b.WriteString(" [link] ")
			}
		case channel.SegQuote:
			// Shown as the quote / reply_to.
		case channel.SegFace:
			b.WriteString(" [emoji] ")
		case channel.SegImage, channel.SegSticker, channel.SegVoice, channel.SegVideo, channel.SegFile:
			b.WriteString(" " + agent.MediaLabel(&s) + " ")
		default:
			b.WriteString(" [" + string(s.Type) + "] ")
		}
	}
	return r.clean(b.String(), r.chars)
}

// clean scrubs text of the ids the Scope knows and clips it to n runes
// (scrubbed first, so a clip never leaves part of an id).
func (r *renderer) clean(s string, n int) string {
	return clip(strings.Join(strings.Fields(r.sc.Scrub(s)), " "), n)
}

// name returns a display name for the model, never an id.
func (r *renderer) name(ev *channel.Event) string {
	if isSelf(ev, r.botID) || ev.Sender.Name == "" || ev.Sender.Name == ev.Sender.ID {
		return ""
	}
	return r.clean(ev.Sender.Name, 32)
}

// quotedSpeaker returns the alias of the author of the message ev quotes
// ("" when unknown) and whether that is the bot.
func (r *renderer) quotedSpeaker(ev *channel.Event) (string, bool) {
	q := ev.Quoted
	if q == nil {
		return "", false
	}
	if q.FromBot || (r.botID != "" && q.Sender.ID == r.botID) {
		return r.botAlias, true
	}
	return r.user(q.Sender.ID), false
}

// addressed returns the aliases a bot message was directed at (its
// mentions and the sender of the message it quoted).
func (r *renderer) addressed(ev *channel.Event) []string {
	var out []string
	for _, s := range ev.Segments {
		if s.Type == channel.SegMention {
			if a := r.mention(s.UserID); a != "" {
				out = append(out, a)
			}
		}
	}
	if ev.Quoted != nil && ev.Quoted.Sender.ID != "" {
		out = append(out, r.user(ev.Quoted.Sender.ID))
	}
	return out
}

// at formats a message time: the clock time, with the date when it is not
// the date of prev (zero prev: always).
func at(t, prev time.Time) string {
	if t.IsZero() {
		return ""
	}
	t = t.UTC()
	if p := prev.UTC(); !prev.IsZero() && p.YearDay() == t.YearDay() && p.Year() == t.Year() {
		return t.Format(clockLayout)
	}
	return t.Format(dateLayout)
}

// candidateIDs are the ids of one rating's candidates: the one each is
// shown to the model with (its message id's alias; "c1", "c2", … by
// position when it has no id or shares it), the one each is recorded with
// (its message id), and every id an answer may name one by.
type candidateIDs struct {
	model  []string
	record []string
	index  map[string]int
}

// newCandidateIDs names the candidates. An answer may name a candidate by
// its alias (the model saw it), its real message id (the answer came back
// through agent.Private, which restores aliases) or its position label
// ("c1", …, as scripted models and older prompts answer).
func newCandidateIDs(sc *agent.Scope, cands []*channel.Event) candidateIDs {
	ids := candidateIDs{model: make([]string, len(cands)), record: make([]string, len(cands)),
		index: make(map[string]int, 3*len(cands))}
	add := func(id string, i int) {
		if _, ok := ids.index[id]; !ok && id != "" {
			ids.index[id] = i
		}
	}
	for i, ev := range cands {
		label := "c" + strconv.Itoa(i+1)
		a := sc.Message(ev.MessageID)
		if _, dup := ids.index[a]; a == "" || dup {
			a = label
		}
		ids.model[i], ids.record[i] = a, cmpOr(ev.MessageID, a)
		add(a, i)
	}
	for i, ev := range cands {
		add(ev.MessageID, i)
	}
	for i := range cands {
		add("c"+strconv.Itoa(i+1), i)
	}
	return ids
}

// toModel rewrites text that goes back to the model (the echo of an
// unusable answer, the problem with it) so that it names candidates by
// their aliases, never by the real ids an agent.Private boundary restored.
func (ids candidateIDs) toModel(sc *agent.Scope, text string) string {
	for i, id := range ids.record {
		if id != ids.model[i] {
			text = strings.ReplaceAll(text, strconv.Quote(id), strconv.Quote(ids.model[i]))
		}
	}
	return sc.Scrub(text)
}

// buildRequest assembles the router request for the candidates (in.Event
// first, then in.Others), rendered through sc.
func (r *ModelRouter) buildRequest(sc *agent.Scope, session string, in Input, cands []*channel.Event, ids candidateIDs, criteria string, now time.Time) agent.Request {
	botID := in.Event.BotID
	// Register everything the request may show, so that ids typed in the
	// texts are scrubbed.
	for i := range in.Recent {
		sc.Learn(&in.Recent[i])
	}
	for _, ev := range cands {
		sc.Learn(ev)
	}
	rd := newRenderer(sc, botID, r.transcriptChars)

	isCand := make(map[string]bool, len(cands))
	for _, c := range cands {
		isCand[c.MessageID] = true
	}
	recent := make([]*channel.Event, 0, len(in.Recent))
	for i := range in.Recent {
		if !isCand[in.Recent[i].MessageID] && in.Recent[i].Kind != channel.KindNotice {
			recent = append(recent, &in.Recent[i])
		}
	}
	recent = recent[r.windowStart(session, recent):]

	p := payload{Bot: botInfo{Speaker: rd.botAlias, Names: r.aliases}, Criteria: sc.Scrub(strings.TrimSpace(criteria)),
		Transcript: make([]line, 0, len(recent)), Candidates: make([]candidate, 0, len(cands)), Now: now.UTC().Format(nowLayout)}
	lastBot := -1
	named := make(map[string]string)
	var prev time.Time
	for i, ev := range recent {
		self := isSelf(ev, botID)
		if self {
			lastBot = i
		}
		l := line{At: at(ev.Time, prev), Speaker: rd.speaker(ev), IsBot: self || ev.Sender.IsBot, Text: rd.text(ev.Segments)}
		if n := rd.name(ev); n != "" && named[l.Speaker] != n {
			l.Name, named[l.Speaker] = n, n
		}
		l.ReplyTo, _ = rd.quotedSpeaker(ev)
		if !ev.Time.IsZero() {
			prev = ev.Time
		}
		p.Transcript = append(p.Transcript, l)
	}
	var lastTo map[string]bool
	if lastBot >= 0 {
		ev := recent[lastBot]
		to := rd.addressed(ev)
		p.BotLast = &botLast{At: at(ev.Time, now), Addressed: to, MessagesSince: len(recent) - lastBot - 1}
		lastTo = make(map[string]bool, len(to))
		for _, s := range to {
			lastTo[s] = true
		}
	}
	for i, ev := range cands {
		c := candidate{MessageID: ids.model[i], At: at(ev.Time, now), Speaker: rd.speaker(ev), Name: rd.name(ev),
			IsBot: ev.Sender.IsBot, Text: rd.text(ev.Segments)}
		for _, s := range ev.Segments {
			if s.Type == channel.SegMention {
				if m := rd.mention(s.UserID); m != "" {
					c.Mentions = append(c.Mentions, m)
					c.MentionsMe = c.MentionsMe || (botID != "" && s.UserID == botID)
				}
			}
		}
		if q := ev.Quoted; q != nil {
			speaker, fromBot := rd.quotedSpeaker(ev)
			text := rd.clean(q.Text, r.transcriptChars)
			if len(q.Segments) > 0 {
				text = rd.text(q.Segments)
			}
			c.Quote = &quoteInfo{Speaker: speaker, IsBot: fromBot || q.Sender.IsBot, Text: text}
			c.QuotesBot = fromBot
		}
		c.AfterBotToSpeaker = lastTo[c.Speaker]
		p.Candidates = append(p.Candidates, c)
	}
	var body strings.Builder
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p) // plain structs of strings, numbers and booleans: cannot fail

	user := agent.Message{Role: agent.RoleUser, Content: userIntro + strings.TrimSuffix(body.String(), "\n")}
	for _, s := range in.Event.Segments {
		// Only inline images: a remote media URL can carry ids and
		// credentials (agent.Private drops such parts as well).
		if s.Type == channel.SegImage && s.Media != nil && strings.HasPrefix(s.Media.URL, "data:image/") {
			user.Parts = append(user.Parts, agent.Part{ImageURL: s.Media.URL, Detail: "low"})
		}
	}
	zero := 0.0
	return agent.Request{
		Purpose:     agent.PurposeRouter,
		Messages:    []agent.Message{{Role: agent.RoleSystem, Content: routerSystem}, user},
		MaxTokens:   300 + 150*len(cands),
		Temperature: &zero,
		JSON:        true,
	}
}

// reminder is the follow-up message after an unusable answer.
func reminder(problem string, ids []string) string {
	return "Your answer could not be used (" + problem + "). Answer again with only the JSON object, exactly in this form:\n" +
		OutputSchema + "\nInclude every candidate exactly once: " + strings.Join(ids, ", ") + "."
}
