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

// routerSystem is the router's system prompt. It never changes, so
// providers can cache it.
const routerSystem = `You rate new messages in a group chat for a chat bot ("you" in the data). For every candidate message decide two things, each with a reason of one short sentence:

1. relevance.directed — "yes" only if the message is clearly addressed to the bot: it names the bot (see aliases), mentions "you", quotes the bot, or directly continues the bot's last message to this speaker. A question to the group in general, or talk between other people, is "no". Answer yes or no, never a probability.
2. chat_in.score — a number from 0 to 1: how natural and welcome it would be for the bot to join in now, as a friendly member of the group. Use 0 when someone asks the bot to stop, be quiet or go away, or when the talk is a mechanical loop (bots answering bots, repeated text). Keep it low for private talk between others, small talk that needs no answer, or when the bot spoke a lot recently. Use high scores only when the bot has something useful or fitting to add.

The transcript is oldest first; speakers are aliases (u1, u2, …; "you" is the bot); age_s is seconds before now; texts may be shortened. Follow the group's criteria when given.

Answer with only a JSON object, no other text, exactly in this form:
` + OutputSchema + `
Include every candidate exactly once, with its message_id.`

// payload is the JSON the router model rates.
type payload struct {
	Bot        botInfo     `json:"bot"`
	Criteria   string      `json:"criteria,omitempty"`
	Transcript []line      `json:"transcript"`
	Candidates []candidate `json:"candidates"`
}

type botInfo struct {
	Speaker     string   `json:"speaker"`
	Aliases     []string `json:"aliases,omitempty"`
	LastMessage *botLast `json:"last_message,omitempty"`
}

type botLast struct {
	Text          string   `json:"text"`
	AgeS          int64    `json:"age_s"`
	Addressed     []string `json:"addressed,omitempty"`
	MessagesSince int      `json:"messages_since"`
}

type line struct {
	Speaker string `json:"speaker"`
	Name    string `json:"name,omitempty"`
	IsBot   bool   `json:"is_bot"`
	AgeS    int64  `json:"age_s"`
	Text    string `json:"text"`
}

type quoteInfo struct {
	Speaker string `json:"speaker,omitempty"`
	IsBot   bool   `json:"is_bot"`
	Text    string `json:"text,omitempty"`
}

type candidate struct {
	MessageID string `json:"message_id"`
	line
	Mentions   []string   `json:"mentions,omitempty"`
	Quote      *quoteInfo `json:"quote,omitempty"`
	QuotesBot  bool       `json:"quotes_bot,omitempty"`
	MentionsMe bool       `json:"mentions_bot,omitempty"`
	// AfterBotToSpeaker: the bot's last message addressed this speaker.
	AfterBotToSpeaker bool `json:"bot_last_addressed_speaker,omitempty"`
}

// aliaser replaces user ids with u1, u2, … in order of first use; the bot
// is "you". Aliases are stable within one call only.
type aliaser struct {
	bot string
	ids map[string]string
}

const botSpeaker = "you"

func newAliaser(botID string) *aliaser { return &aliaser{bot: botID, ids: map[string]string{}} }

func (a *aliaser) alias(id string) string {
	if id == a.bot && id != "" {
		return botSpeaker
	}
	if s, ok := a.ids[id]; ok {
		return s
	}
	s := "u" + strconv.Itoa(len(a.ids)+1)
	a.ids[id] = s
	return s
}

// isSelf reports whether ev is the bot's own message.
func isSelf(ev *channel.Event, botID string) bool {
	return ev.Kind == channel.KindSelf || (botID != "" && ev.Sender.ID == botID)
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

// render returns a message as plain text for the model: its own text, with
// mentions as @alias and media as placeholders.
func render(ev *channel.Event, a *aliaser) string {
	var b strings.Builder
	for _, s := range ev.Segments {
		switch s.Type {
		case channel.SegText:
			b.WriteString(s.Text)
		case channel.SegMention:
			b.WriteString(" @" + a.alias(s.UserID) + " ")
		case channel.SegLink:
			if s.Text != "" {
				b.WriteString(" [link: " + s.Text + "] ")
			} else {
				b.WriteString(" [link] ")
			}
		case channel.SegQuote:
			// Shown separately as the quote.
		case channel.SegFace:
			b.WriteString(" [emoji] ")
		default:
			b.WriteString(" [" + string(s.Type) + "] ")
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func ageSeconds(now, t time.Time) int64 {
	if t.IsZero() || t.After(now) {
		return 0
	}
	return int64(now.Sub(t) / time.Second)
}

// addressed returns the aliases a bot message was directed at (its
// mentions and the sender of the message it quoted).
func addressed(ev *channel.Event, a *aliaser) []string {
	var out []string
	for _, s := range ev.Segments {
		if s.Type == channel.SegMention {
			out = append(out, a.alias(s.UserID))
		}
	}
	if ev.Quoted != nil && ev.Quoted.Sender.ID != "" {
		out = append(out, a.alias(ev.Quoted.Sender.ID))
	}
	return out
}

// buildRequest assembles the router request for the candidates (in.Event
// first, then in.Others). ids are the candidate ids given to the model, in
// the same order.
func (r *ModelRouter) buildRequest(in Input, cands []*channel.Event, ids []string, criteria string, now time.Time) agent.Request {
	botID := in.Event.BotID
	a := newAliaser(botID)
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
	if len(recent) > r.transcriptMessages {
		recent = recent[len(recent)-r.transcriptMessages:]
	}

	p := payload{Bot: botInfo{Speaker: botSpeaker, Aliases: r.aliases}, Criteria: strings.TrimSpace(criteria),
		Transcript: make([]line, 0, len(recent)), Candidates: make([]candidate, 0, len(cands))}
	lastBot := -1
	for i, ev := range recent {
		self := isSelf(ev, botID)
		speaker := botSpeaker
		if self {
			lastBot = i
		} else {
			speaker = a.alias(ev.Sender.ID)
		}
		p.Transcript = append(p.Transcript, line{Speaker: speaker, Name: r.name(ev, self),
			IsBot: self || ev.Sender.IsBot, AgeS: ageSeconds(now, ev.Time), Text: clip(render(ev, a), r.transcriptChars)})
	}
	var lastTo map[string]bool
	if lastBot >= 0 {
		ev := recent[lastBot]
		to := addressed(ev, a)
		p.Bot.LastMessage = &botLast{Text: clip(render(ev, a), r.transcriptChars), AgeS: ageSeconds(now, ev.Time),
			Addressed: to, MessagesSince: len(recent) - lastBot - 1}
		lastTo = make(map[string]bool, len(to))
		for _, s := range to {
			lastTo[s] = true
		}
	}
	for i, ev := range cands {
		speaker := a.alias(ev.Sender.ID)
		c := candidate{MessageID: ids[i], line: line{Speaker: speaker, Name: r.name(ev, false), IsBot: ev.Sender.IsBot,
			AgeS: ageSeconds(now, ev.Time), Text: clip(render(ev, a), r.transcriptChars)}}
		for _, s := range ev.Segments {
			if s.Type == channel.SegMention {
				m := a.alias(s.UserID)
				c.Mentions = append(c.Mentions, m)
				c.MentionsMe = c.MentionsMe || m == botSpeaker
			}
		}
		if q := ev.Quoted; q != nil {
			fromBot := q.FromBot || (botID != "" && q.Sender.ID == botID)
			qi := &quoteInfo{IsBot: fromBot || q.Sender.IsBot, Text: clip(q.Text, r.transcriptChars)}
			switch {
			case fromBot:
				qi.Speaker = botSpeaker
			case q.Sender.ID != "":
				qi.Speaker = a.alias(q.Sender.ID)
			}
			c.Quote, c.QuotesBot = qi, fromBot
		}
		c.AfterBotToSpeaker = lastTo[speaker]
		p.Candidates = append(p.Candidates, c)
	}
	body, _ := json.Marshal(p) // plain structs of strings and numbers: cannot fail

	user := agent.Message{Role: agent.RoleUser, Content: "Rate the candidates.\n" + string(body)}
	for _, s := range in.Event.Segments {
		if s.Type == channel.SegImage && s.Media != nil && imageURL(s.Media.URL) {
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

// name returns a display name for the transcript, never an id.
func (r *ModelRouter) name(ev *channel.Event, self bool) string {
	if self || ev.Sender.Name == "" || ev.Sender.Name == ev.Sender.ID {
		return ""
	}
	return clip(ev.Sender.Name, 32)
}

func imageURL(u string) bool {
	return strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "data:image/")
}

// reminder is the follow-up message after an unusable answer.
func reminder(problem string, ids []string) string {
	return "Your answer could not be used (" + problem + "). Answer again with only the JSON object, exactly in this form:\n" +
		OutputSchema + "\nInclude every candidate exactly once: " + strings.Join(ids, ", ") + "."
}
