package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// ErrNoFlags is returned (wrapped) by Compile when Config.Flags is nil.
var ErrNoFlags = errors.New("gate: Config.Flags is required")

// Rules is a compiled [Config]: the twelve default gates (G1–G12) and the
// policy lookups the rest of the pipeline needs (the router's proactive
// settings, quota accounting, the stop window). Build it with Compile. It
// is safe for concurrent use.
type Rules struct {
	ps            *policies
	noRouter      bool
	disabled      bool
	allowlistMode bool
	disabledIDs   set
	allowlist     set
	flags         Flags
	quota         Quota
	counting      bool // some policy sets a quota: model calls are counted
	members       *memberCache
	log           *slog.Logger
	botZone       *time.Location
	stopWindow    time.Duration
	quietInterval time.Duration
	clock         clock.Clock
}

// Compile validates cfg and returns its Rules. Errors wrap
// ErrInvalidConfig (or ErrNoFlags) and name the bad field.
func Compile(cfg Config) (*Rules, error) {
	if cfg.Flags == nil {
		return nil, fmt.Errorf("%w (%w)", ErrInvalidConfig, ErrNoFlags)
	}
	ps, err := compilePolicies(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.Quota == nil && ps.anyQuota() {
		return nil, fmt.Errorf("%w: a quota is set but Config.Quota is nil (gate.NewFlagQuota keeps counters in Flags)", ErrInvalidConfig)
	}
	p := cfg.Policy
	r := &Rules{
		ps:            ps,
		noRouter:      cfg.NoRouter,
		disabled:      p.Disabled,
		allowlistMode: p.GroupAdmission == GroupsAllowlist,
		disabledIDs:   makeSet(p.DisabledGroups),
		allowlist:     makeSet(p.GroupAllowlist),
		flags:         cfg.Flags,
		quota:         cfg.Quota,
		counting:      cfg.Quota != nil && ps.anyQuota(),
		members:       newMemberCache(clock.OrReal(cfg.Clock), p.MemberCacheTTL),
		log:           cfg.Logger,
		botZone:       ps.bot.zone,
		stopWindow:    p.StopWindow,
		quietInterval: p.QuietReplyInterval,
		clock:         clock.OrReal(cfg.Clock),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.stopWindow <= 0 {
		r.stopWindow = DefaultStopWindow
	}
	if r.quietInterval <= 0 {
		r.quietInterval = DefaultQuietReplyInterval
	}
	return r, nil
}

// Default compiles cfg and returns the default chain (see [Rules.Chain]).
func Default(cfg Config) (Chain, error) {
	r, err := Compile(cfg)
	if err != nil {
		return nil, err
	}
	return r.Chain(), nil
}

func (ps *policies) anyQuota() bool {
	q := func(e *effective) bool { return e.quota != Quotas{} }
	if q(ps.bot) {
		return true
	}
	for _, m := range ps.groups {
		for _, e := range m {
			if q(e) {
				return true
			}
		}
	}
	return false
}

// Chain returns a new chain of the twelve deterministic gates in their fixed
// order (G1–G12, as listed in the package doc), named by the Name…
// constants. "Unprompted only" gates (G10–G12) pass direct turns.
func (r *Rules) Chain() Chain {
	return Chain{
		New(NameUnavailableGroup, r.unavailableGroup),
		New(NameBotEnabled, r.botEnabled),
		New(NameGroupEnabled, r.groupEnabled),
		New(NameBotMuted, r.botMuted),
		New(NameModelQuota, r.modelQuota),
		New(NameResponseSuppression, r.responseSuppression),
		New(NameBotChat, r.botChat),
		New(NameVideo, videoOnly),
		New(NameReplyGate, r.replyGate),
		New(NameProactiveSwitch, r.proactiveSwitch),
		New(NameStopWindow, r.stopWindowGate),
		New(NameSampling, r.sampling),
	}
}

// Proactive returns the effective proactive settings for the event's chat,
// with every default filled in (see [Proactive.Resolved]). The router
// takes it as its settings function.
func (r *Rules) Proactive(ev *channel.Event) Proactive {
	return r.ps.lookup(ev).proactive.Resolved()
}

// ProactiveIn is [Rules.Proactive] with the chat's /send switch applied:
// when the owner turned proactive replies on in a chat whose policy has
// both switches off, answering questions is on (chat-in stays as the
// policy says). The default router reads its settings through it.
func (r *Rules) ProactiveIn(ev *channel.Event) Proactive {
	p := r.Proactive(ev)
	if p.On() || ev.SessionKey == "" {
		return p
	}
	// The flag cache answers from memory after the first read.
	mode, err := SendMode(context.Background(), r.flags, ev.SessionKey, r.clock.Now())
	if err == nil && mode == SendOn {
		p.AnswerQuestions = ToggleOn
	}
	return p
}

// RecordModelCall counts one model call made for ev at now against the
// bot's, the group's and the sender's daily counters. It does nothing
// without a Quota, or when no policy sets a quota: only the model-quota
// gate reads the counters, and the policies do not change after Compile,
// so counting would cost a write per model call for nothing. The pipeline
// calls it for each model call it makes for a message (router,
// generation, …).
func (r *Rules) RecordModelCall(ctx context.Context, ev *channel.Event, now time.Time) error {
	if !r.counting {
		return nil
	}
	bot, group, inGroup, user := QuotaKeys(ev, QuotaDay(now, r.botZone))
	keys := []QuotaKey{bot, user}
	if inGroup {
		keys = append(keys, group)
	}
	if b, ok := r.quota.(BatchQuota); ok {
		if err := b.AddAll(ctx, keys, 1); err != nil {
			return fmt.Errorf("gate: record model call: %w", err)
		}
		return nil
	}
	for _, k := range keys {
		if err := r.quota.Add(ctx, k, 1); err != nil {
			return fmt.Errorf("gate: record model call: %w", err)
		}
	}
	return nil
}

// OpenStopWindow opens the configured stop window (Policy.StopWindow) for
// a session at now.
func (r *Rules) OpenStopWindow(ctx context.Context, session string, now time.Time) error {
	return OpenStopWindow(ctx, r.flags, session, now, r.stopWindow)
}

// activeFlag reads a flag and reports whether it is in force at now.
func (r *Rules) activeFlag(ctx context.Context, session, subject, name string, now time.Time) (Flag, bool, error) {
	f, ok, err := r.flags.GetFlag(ctx, session, subject, name)
	if err != nil {
		return Flag{}, false, fmt.Errorf("gate: read flag %s: %w", name, err)
	}
	return f, ok && f.Active(now), nil
}

func isGroup(t *Turn) bool { return t.Event.Chat.Kind == channel.Group }

func stamp(t time.Time, loc *time.Location) string { return t.In(loc).Format("2006-01-02 15:04 MST") }

// G1.
func (r *Rules) unavailableGroup(ctx context.Context, t *Turn) Verdict {
	if !isGroup(t) {
		return Pass
	}
	f, on, err := r.activeFlag(ctx, t.SessionKey, "", FlagUnavailable, t.Now)
	if err != nil {
		return Failed(err)
	}
	if !on {
		return Pass
	}
	at, why := parseUnavailable(f.Value)
	ev := &t.Event
	if (ev.Source == "" || ev.Source == channel.SourceLive) && ev.Time.After(at) {
		// A live message from the group after the mark: the bot is back.
		if err := r.flags.ClearFlag(ctx, t.SessionKey, "", FlagUnavailable); err != nil {
			r.log.Warn("clear unavailable mark", "session", t.SessionKey, "err", err)
		}
		return Pass
	}
	reason := "the bot is no longer in this group"
	if why != "" {
		reason += " (" + why + ")"
	}
	return Stopped(IgnoredUnavailableGroup, reason)
}

// G2.
func (r *Rules) botEnabled(context.Context, *Turn) Verdict {
	if r.disabled {
		return Stopped(IgnoredBotDisabled, "the bot is switched off")
	}
	return Pass
}

// inGroupSet reports whether s holds the group by id or "platform:id".
func inGroupSet(s set, ev *channel.Event) bool {
	return len(s) > 0 && (s.has(ev.Chat.ID) || s.has(ev.Platform+":"+ev.Chat.ID))
}

// G3.
func (r *Rules) groupEnabled(_ context.Context, t *Turn) Verdict {
	if !isGroup(t) {
		return Pass
	}
	ev := &t.Event
	switch {
	case r.ps.lookup(ev).groupDisabled || inGroupSet(r.disabledIDs, ev):
		return Stopped(IgnoredGroupDisabled, "the bot is switched off in group "+ev.Chat.ID)
	case r.allowlistMode && !inGroupSet(r.allowlist, ev):
		return Stopped(IgnoredGroupDisabled, "group "+ev.Chat.ID+" is not on the group allowlist")
	}
	return Pass
}

// G4.
func (r *Rules) botMuted(ctx context.Context, t *Turn) Verdict {
	if !isGroup(t) {
		return Pass
	}
	f, on, err := r.activeFlag(ctx, t.SessionKey, "", FlagMuted, t.Now)
	if err != nil {
		return Failed(err)
	}
	if on {
		return Stopped(IgnoredBotMuted, "the bot is muted in this group until "+stamp(f.Until, r.botZone))
	}
	return Pass
}

// G5.
func (r *Rules) modelQuota(ctx context.Context, t *Turn) Verdict {
	e := r.ps.lookup(&t.Event)
	if t.Owner || e.quota == (Quotas{}) || r.quota == nil {
		return Pass
	}
	bot, group, inGroup, user := QuotaKeys(&t.Event, QuotaDay(t.Now, r.botZone))
	check := func(k QuotaKey, limit int, what string) (Verdict, bool) {
		if limit <= 0 {
			return Pass, false
		}
		used, err := r.quota.Used(ctx, k)
		if err != nil {
			return Failed(fmt.Errorf("gate: read quota: %w", err)), true
		}
		if used >= limit {
			return Stopped(IgnoredModelQuota, fmt.Sprintf("the %s's daily model quota (%d calls) is used up", what, limit)), true
		}
		return Pass, false
	}
	if v, done := check(bot, e.quota.Bot, "bot"); done {
		return v
	}
	if inGroup {
		if v, done := check(group, e.quota.Group, "group"); done {
			return v
		}
	}
	if v, done := check(user, e.quota.User, "sender"); done {
		return v
	}
	return Pass
}

// G6.
func (r *Rules) responseSuppression(ctx context.Context, t *Turn) Verdict {
	for _, subject := range [2]string{t.Event.Sender.ID, ""} {
		f, on, err := r.activeFlag(ctx, t.SessionKey, subject, FlagSuppressed, t.Now)
		if err != nil {
			return Failed(err)
		}
		if on {
			who := "the sender is"
			if subject == "" {
				who = "replies in this chat are"
			}
			reason := fmt.Sprintf("%s paused until %s", who, stamp(f.Until, r.botZone))
			if f.Value != "" {
				reason += ": " + f.Value
			}
			return Stopped(IgnoredResponseSuppression, reason)
		}
		if t.Event.Sender.ID == "" {
			break
		}
	}
	return Pass
}

// G7.
func (r *Rules) botChat(_ context.Context, t *Turn) Verdict {
	if !t.Event.Sender.IsBot {
		return Pass
	}
	switch r.ps.lookup(&t.Event).botChat {
	case BotChatOff:
		return Stopped(IgnoredBotChatSuppressed, "the sender is a bot and bot chat is off")
	case BotChatMentions:
		if !t.Direct {
			return Stopped(IgnoredBotChatSuppressed, "the sender is a bot and did not address the bot directly")
		}
	}
	return Pass
}

// G8: a message of nothing but video is not answered; nor, unless it is
// addressed to the bot, one of nothing but stickers (a sticker is a
// reaction, never on its own a reason to join a conversation).
func videoOnly(_ context.Context, t *Turn) Verdict {
	video, sticker := false, false
	for _, s := range t.Event.Segments {
		switch s.Type {
		case channel.SegVideo:
			video = true
		case channel.SegSticker:
			sticker = true
		case channel.SegImage, channel.SegVoice, channel.SegLink:
			return Pass
		case channel.SegText:
			for _, c := range s.Text {
				if c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\u3000' {
					return Pass
				}
			}
		}
	}
	switch {
	case video:
		return Stopped(IgnoredVideo, "the message is only a video")
	case sticker && !t.Direct:
		return Stopped(IgnoredStickerOnly, "the message is only a sticker and not addressed to the bot")
	}
	return Pass
}

// G9: owner bypass → blocked → allowlist → exempt → active hours → member
// level.
func (r *Rules) replyGate(ctx context.Context, t *Turn) Verdict {
	if t.Owner {
		return Pass
	}
	ev := &t.Event
	e := r.ps.lookup(ev)
	sender := ev.Sender.ID
	switch {
	case e.blocked.has(sender):
		return Stopped(IgnoredBlockedUser, "sender "+sender+" is blocked")
	case len(e.allowed) > 0 && !e.allowed.has(sender):
		return Stopped(IgnoredNotAllowlisted, "sender "+sender+" is not on the allowlist")
	case e.exempt.has(sender):
		return Pass
	}
	if !e.hours.Contains(t.Now.In(e.zone)) {
		return r.quiet(ctx, t, e)
	}
	if isGroup(t) && e.minLevel > 0 {
		return r.memberLevel(ctx, t, e)
	}
	return Pass
}

// quiet stops a message outside the active hours; a direct message gets the
// quiet reply at most once per interval per chat.
func (r *Rules) quiet(ctx context.Context, t *Turn, e *effective) Verdict {
	v := Stopped(IgnoredQuietHours, fmt.Sprintf("outside the active hours %s (%s)", e.hours, e.zone))
	if !t.Direct || e.quietReply == "" {
		return v
	}
	_, on, err := r.activeFlag(ctx, t.SessionKey, "", FlagQuietReply, t.Now)
	if err != nil {
		r.log.Warn("read quiet-reply flag", "session", t.SessionKey, "err", err)
		return v
	}
	if on {
		return v
	}
	err = r.flags.SetFlag(ctx, Flag{SessionKey: t.SessionKey, Name: FlagQuietReply, Until: t.Now.Add(r.quietInterval)})
	if err != nil {
		r.log.Warn("set quiet-reply flag", "session", t.SessionKey, "err", err)
		return v
	}
	v.Reply = e.quietReply
	return v
}

func (r *Rules) memberLevel(ctx context.Context, t *Turn, e *effective) Verdict {
	role, level, known, err := r.members.member(ctx, t.Members, &t.Event)
	if err != nil {
		r.log.Warn("member lookup failed", "session", t.SessionKey, "user", t.Event.Sender.ID, "err", err)
	}
	switch {
	case role == channel.RoleOwner || role == channel.RoleAdmin:
		return Pass
	case known && level < e.minLevel:
		return Stopped(IgnoredMemberLevel, fmt.Sprintf("member level %d is below the group minimum %d", level, e.minLevel))
	case !known && e.levelDeny:
		return Stopped(IgnoredMemberLevel, fmt.Sprintf("member level unknown and the group minimum is %d (policy deny)", e.minLevel))
	}
	return Pass
}

// G10.
func (r *Rules) proactiveSwitch(ctx context.Context, t *Turn) Verdict {
	switch {
	case t.Direct:
		return Pass
	case r.noRouter:
		return Stopped(IgnoredProactiveOff, "not addressed to the bot and no router is configured")
	}
	mode, err := SendMode(ctx, r.flags, t.SessionKey, t.Now)
	if err != nil {
		return Failed(err)
	}
	switch {
	case mode == SendOff:
		return Stopped(IgnoredProactiveOff, "not addressed to the bot and proactive replies were turned off in this chat (/send off)")
	case mode == SendOn:
		return Pass
	case !r.ps.lookup(&t.Event).proactive.On():
		return Stopped(IgnoredProactiveOff, "not addressed to the bot and both proactive switches are off")
	}
	return Pass
}

// G11.
func (r *Rules) stopWindowGate(ctx context.Context, t *Turn) Verdict {
	if t.Direct {
		return Pass
	}
	f, on, err := r.activeFlag(ctx, t.SessionKey, "", FlagStopWindow, t.Now)
	if err != nil {
		return Failed(err)
	}
	if on {
		return Stopped(IgnoredStopRequested, "someone asked the bot to stop; unprompted replies are off until "+stamp(f.Until, r.botZone))
	}
	return Pass
}

// G12.
func (r *Rules) sampling(_ context.Context, t *Turn) Verdict {
	if t.Direct || t.Owner {
		return Pass
	}
	rate := r.ps.lookup(&t.Event).sampling
	if rate >= 1 {
		return Pass
	}
	if u := SampleValue(t.SessionKey, t.Event.MessageID); u >= rate {
		return Stopped(IgnoredSampledOut, fmt.Sprintf("not sampled (%.3f >= rate %.3f)", u, rate))
	}
	return Pass
}

// SampleValue maps (session, message id) to a number in [0,1) with a
// stable hash, so a retried message is sampled the same way. A message is
// sampled in when the value is below the rate.
// The hash is 64-bit FNV-1a over session, a zero byte and the message id,
// followed by the murmur3 finaliser so that ids differing only in their
// last characters (sequential ids) spread over the whole range.
func SampleValue(session, messageID string) float64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(session); i++ {
		h = (h ^ uint64(session[i])) * prime
	}
	h *= prime // the zero separator: h ^ 0 == h
	for i := 0; i < len(messageID); i++ {
		h = (h ^ uint64(messageID[i])) * prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return float64(h>>11) / (1 << 53)
}
