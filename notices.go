package persona

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// NoticeOptions says what the bot does with platform notices besides
// recording them: answer a poke, welcome new members, answer friend
// requests. Every notice ends with one record either way.
type NoticeOptions struct {
	// NoPokeReply turns off the short in-persona reply to someone who
	// pokes the bot (on by default when there is a model).
	NoPokeReply bool
	// PokeCooldown is the shortest time between two poke replies to one
	// person in one chat (default 60 s); pokes within it are recorded
	// unanswered.
	PokeCooldown time.Duration
	// WelcomeGroups are the groups (chat id, or "<platform>:<chat id>")
	// whose new members get a short welcome. Welcomes are off in every
	// other group unless the owner types "/welcome on" there.
	WelcomeGroups []string
	// WelcomeCooldown is the shortest time between two welcomes in one
	// group (default 60 s): a wave of joins gets one.
	WelcomeCooldown time.Duration
	// FriendRequests decides friend requests on platforms that have them
	// (OneBot). nil leaves them for a person to answer in the platform's
	// own client; the request is recorded either way. See
	// AcceptAllFriends and AcceptOwnerFriends.
	FriendRequests func(ctx context.Context, r FriendRequest) (accept bool, reason string)
}

// FriendRequest is a request to befriend the bot.
type FriendRequest struct {
	Platform, BotID string
	// UserID is the requester's platform id; Comment the text they sent
	// with the request.
	UserID, Comment string
	// Owner tells whether the requester is one of the owners.
	Owner bool
}

// AcceptAllFriends is a FriendRequests policy that accepts everyone.
func AcceptAllFriends(context.Context, FriendRequest) (bool, string) {
	return true, "the policy accepts every friend request"
}

// AcceptOwnerFriends is a FriendRequests policy that accepts the owners and
// refuses everyone else.
func AcceptOwnerFriends(_ context.Context, r FriendRequest) (bool, string) {
	if r.Owner {
		return true, "the requester is an owner"
	}
	return false, "the policy accepts only the owners"
}

// Defaults of NoticeOptions.
const (
	DefaultPokeCooldown    = 60 * time.Second
	DefaultWelcomeCooldown = 60 * time.Second
)

// The outcome codes of notices and scheduled messages the bot acted on.
const (
	// RepliedNotice: a poke was answered or a new member welcomed.
	RepliedNotice outcome.Code = "replied_notice"
	// NoticeFriendRequest: a friend request, answered by the policy or
	// left for a person.
	NoticeFriendRequest outcome.Code = "notice_friend_request"
)

// Flags the notice handlers keep (session flags, like the gates').
const (
	// flagWelcome turns welcomes on in a group (/welcome on).
	flagWelcome = "welcome"
	// flagNoticeCooldown spaces poke replies (Subject: the user) and
	// welcomes (Subject ""). Value is the id of the item that claimed
	// it, so that a retried turn still answers.
	flagNoticeCooldown = "notice_cooldown"
)

// synthetic is a turn that answers something other than a message (a
// poke, a new member, a schedule): the pipeline writes the message the
// model answers, and the turn runs the gates (as a direct turn), the
// generation, the review and the delivery like any other.
type synthetic struct {
	trigger string
	// text stands in for the message; sender for who wrote it.
	text   string
	sender channel.Sender
	// code is recorded when the reply is sent; quiet when the cooldown
	// keeps the turn from replying.
	code, quiet outcome.Code
	// cooldown is claimed once the gates passed: subject, length.
	cooldownSubject string
	cooldown        time.Duration
}

// noticeAction decides, when a notice arrives, whether a turn must act on
// it (enqueue) or it is only recorded (why says what was not done).
func (p *Pipeline) noticeAction(ctx context.Context, ev *channel.Event) (act bool, why string) {
	n := ev.Notice
	no := &p.opt.Notices
	switch n.Type {
	case channel.NoticePoke:
		switch {
		case n.UserID != "" && n.UserID != ev.BotID:
			return false, "someone else was poked"
		case no.NoPokeReply:
			return false, "poke replies are off"
		case p.runner == nil:
			return false, "no model to answer pokes with"
		}
		// A private poke is answered only where a private message would be.
		poker := *ev
		if poker.Sender.ID == "" {
			poker.Sender.ID = n.Operator
		}
		if v := p.admit.Admit(&poker); v.Stop {
			return false, "poke not answered: " + v.Reason
		}
		return true, ""
	case channel.NoticeGroupIncrease:
		switch {
		case ev.Chat.Kind != channel.Group:
			return false, "not a group"
		case n.UserID == "" || n.UserID == ev.BotID:
			return false, "the bot itself joined"
		case p.runner == nil:
			return false, "no model to welcome with"
		}
		on, err := p.welcomeOn(ctx, ev)
		if err != nil {
			p.log.Warn("read welcome switch", "session", ev.SessionKey, "err", err)
			return false, "welcome switch unreadable: " + err.Error()
		}
		if !on {
			return false, "welcome messages are off in this group"
		}
		return true, ""
	case channel.NoticeFriendRequest:
		if no.FriendRequests == nil {
			return false, "no friend-request policy: left for a person to answer"
		}
		return true, ""
	}
	return false, ""
}

// welcomeOn reports whether new members of ev's group are welcomed.
func (p *Pipeline) welcomeOn(ctx context.Context, ev *channel.Event) (bool, error) {
	if slices.Contains(p.opt.Notices.WelcomeGroups, ev.Chat.ID) ||
		slices.Contains(p.opt.Notices.WelcomeGroups, ev.Platform+":"+ev.Chat.ID) {
		return true, nil
	}
	f, ok, err := p.flags.GetFlag(ctx, ev.SessionKey, "", flagWelcome)
	if err != nil {
		return false, err
	}
	return ok && f.Active(p.clk.Now()) && f.Value == "on", nil
}

// noticeTurn handles a notice item the queue holds. ok is false when the
// notice is to be answered by a synthetic turn (syn filled in).
func (p *Pipeline) noticeTurn(ctx context.Context, l inbound.Lease, tr *turnTrail) (act action, syn *synthetic) {
	ev := &l.Event
	n := ev.Notice
	code := outcome.Notice(n.Type)
	tr.Trigger = "notice_" + n.Type
	switch n.Type {
	case channel.NoticePoke:
		sender := ev.Sender
		if sender.ID == "" {
			sender.ID = n.Operator
		}
		return action{}, &synthetic{trigger: "poke", code: RepliedNotice, quiet: code, sender: sender,
			text:            "[pokes you. Answer with one short, playful line in character.]",
			cooldownSubject: sender.ID, cooldown: cmpDur(p.opt.Notices.PokeCooldown, DefaultPokeCooldown)}
	case channel.NoticeGroupIncrease:
		sender := channel.Sender{ID: n.UserID}
		if ev.Sender.ID == n.UserID {
			sender = ev.Sender
		}
		return action{}, &synthetic{trigger: "welcome", code: RepliedNotice, quiet: code, sender: sender,
			text:     "[has just joined the group. Welcome them in one short line in character.]",
			cooldown: cmpDur(p.opt.Notices.WelcomeCooldown, DefaultWelcomeCooldown)}
	case channel.NoticeFriendRequest:
		return p.friendRequest(ctx, l), nil
	case noticeSchedule:
		if ev.Source == channel.SourceSchedule {
			return action{}, scheduledTurn(n, tr)
		}
	}
	return complete(code, "platform notice recorded"), nil
}

// friendRequest answers a friend request by the policy.
func (p *Pipeline) friendRequest(ctx context.Context, l inbound.Lease) action {
	ev := &l.Event
	n := ev.Notice
	decide := p.opt.Notices.FriendRequests
	if decide == nil {
		return complete(NoticeFriendRequest, "no friend-request policy: left for a person to answer")
	}
	user := n.UserID
	if user == "" {
		user = ev.Sender.ID
	}
	owner := slices.Contains(p.opt.Owners, user)
	accept, why := decide(ctx, FriendRequest{Platform: ev.Platform, BotID: ev.BotID, UserID: user, Comment: n.Comment, Owner: owner})
	verb := "refused"
	if accept {
		verb = "accepted"
	}
	st := p.channelFor(ev.Platform, ev.BotID)
	if st == nil {
		return action{kind: actRetry, err: fmt.Errorf("no channel for platform %q bot %q", ev.Platform, ev.BotID)}
	}
	rr, ok := channel.As[channel.RequestResponder](st.ch)
	if !ok {
		return complete(NoticeFriendRequest, fmt.Sprintf("the policy %s it (%s), but the %s channel cannot answer friend requests", verb, why, ev.Platform))
	}
	if err := rr.AnswerFriendRequest(ctx, *n, accept); err != nil {
		if ctx.Err() != nil {
			return action{kind: actRelease}
		}
		switch c := channel.Classify(err); {
		case c == channel.ClassOffline:
			return action{kind: actSnooze, at: p.clk.Now().Add(p.opt.OfflineRetry), err: err}
		case c.Definitive():
			return complete(NoticeFriendRequest, fmt.Sprintf("the policy %s it (%s); the platform refused the answer: %v", verb, why, err))
		}
		return action{kind: actRetry, err: fmt.Errorf("answer friend request: %w", err)}
	}
	return complete(NoticeFriendRequest, fmt.Sprintf("%s by the policy: %s", verb, why))
}

// claimCooldown takes a synthetic turn's cooldown: ok is false (with why)
// when another turn answered within it.
func (p *Pipeline) claimCooldown(ctx context.Context, l inbound.Lease, syn *synthetic) (ok bool, why string, err error) {
	if syn.cooldown <= 0 {
		return true, "", nil
	}
	now := p.clk.Now()
	f, found, err := p.flags.GetFlag(ctx, l.SessionKey, syn.cooldownSubject, flagNoticeCooldown)
	if err != nil {
		return false, "", fmt.Errorf("read notice cooldown: %w", err)
	}
	if found && f.Active(now) && f.Value != l.ID {
		return false, fmt.Sprintf("answered one within the last %s (cooldown until %s)", syn.cooldown,
			f.Until.In(p.zone()).Format("15:04:05")), nil
	}
	if found && f.Value == l.ID {
		return true, "", nil // this turn claimed it in an earlier attempt
	}
	err = p.flags.SetFlag(ctx, gate.Flag{SessionKey: l.SessionKey, Subject: syn.cooldownSubject, Name: flagNoticeCooldown,
		Until: now.Add(syn.cooldown), Value: l.ID})
	if err != nil {
		return false, "", fmt.Errorf("store notice cooldown: %w", err)
	}
	return true, "", nil
}

// asMessage rewrites a synthetic turn's event into the message the model
// answers: its text and sender, no message id (nothing to quote).
func (syn *synthetic) asMessage(ev channel.Event) channel.Event {
	out := ev
	out.Kind = channel.KindMessage
	out.MessageID = ""
	out.Notice = nil
	out.Quoted = nil
	out.Sender = syn.sender
	out.Segments = []channel.Segment{{Type: channel.SegText, Text: syn.text}}
	return out
}

func cmpDur(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// zone is the bot's time zone (Options.Zone, default UTC).
func (p *Pipeline) zone() *time.Location {
	if p.opt.Zone == nil {
		return time.UTC
	}
	return p.opt.Zone
}

// noticeReason is the record's reason for a notice no turn acts on.
func noticeReason(why string) string {
	if why == "" {
		return "platform notice recorded"
	}
	return "platform notice recorded; " + strings.TrimSpace(why)
}
