package gate

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Defaults of the gate policy.
const (
	// DefaultStopWindow is how long a group stop silences unprompted
	// replies.
	DefaultStopWindow = 10 * time.Minute
	// DefaultQuietReplyInterval is the least time between two quiet-hours
	// replies in one chat.
	DefaultQuietReplyInterval = time.Hour
	// DefaultMemberCacheTTL is how long a looked-up member level is reused.
	DefaultMemberCacheTTL = 10 * time.Minute
	// DefaultChatCooldown is the pause after a sent chat-in reply.
	DefaultChatCooldown = 30 * time.Second
)

// Toggle is an on/off switch whose zero value means "the default" (or, in
// a GroupPolicy, "as the bot's policy says").
type Toggle string

// The toggle values.
const (
	ToggleOn  Toggle = "on"
	ToggleOff Toggle = "off"
)

// Valid reports whether t is "", on or off.
func (t Toggle) Valid() bool { return t == "" || t == ToggleOn || t == ToggleOff }

// Or returns def for the zero Toggle, else whether t is on.
func (t Toggle) Or(def bool) bool {
	if t == "" {
		return def
	}
	return t == ToggleOn
}

// BotChatMode says when a sender flagged as a bot may be answered (G7).
type BotChatMode string

// The bot-chat modes; the zero value means BotChatMentions.
const (
	// BotChatOff never answers bots.
	BotChatOff BotChatMode = "off"
	// BotChatMentions answers bots only on a direct trigger.
	BotChatMentions BotChatMode = "mentions"
	// BotChatOn treats bots like people.
	BotChatOn BotChatMode = "on"
)

// Valid reports whether m is a known mode (or empty).
func (m BotChatMode) Valid() bool {
	return m == "" || m == BotChatOff || m == BotChatMentions || m == BotChatOn
}

// LevelPolicy decides a member whose level stays unknown (G9).
type LevelPolicy string

// The level policies; the zero value means LevelAllow.
const (
	LevelAllow LevelPolicy = "allow"
	LevelDeny  LevelPolicy = "deny"
)

// Valid reports whether p is a known policy (or empty).
func (p LevelPolicy) Valid() bool { return p == "" || p == LevelAllow || p == LevelDeny }

// GroupAdmission says which groups the bot answers in (G3).
type GroupAdmission string

// The group admission modes; the zero value means GroupsOpen.
const (
	// GroupsOpen answers in every group not listed in DisabledGroups.
	GroupsOpen GroupAdmission = "open"
	// GroupsAllowlist answers only in the groups of GroupAllowlist.
	GroupsAllowlist GroupAdmission = "allowlist"
)

// Valid reports whether a is a known mode (or empty).
func (a GroupAdmission) Valid() bool { return a == "" || a == GroupsOpen || a == GroupsAllowlist }

// ChatLevel is how readily the bot chimes in on group talk that is not
// addressed to it (the chat-in switch and its threshold).
type ChatLevel string

// The chat levels; the zero value means ChatLow.
const (
	ChatOff     ChatLevel = "off"
	ChatLow     ChatLevel = "low"
	ChatMedium  ChatLevel = "medium"
	ChatHigh    ChatLevel = "high"
	ChatNoLimit ChatLevel = "no_limit"
)

// Valid reports whether l is a known level (or empty).
func (l ChatLevel) Valid() bool {
	switch l {
	case "", ChatOff, ChatLow, ChatMedium, ChatHigh, ChatNoLimit:
		return true
	}
	return false
}

// Threshold returns the minimum chat-in score of the level: low 0.95,
// medium 0.88, high 0.80, no_limit 0.70; 0 for off (chat-in disabled). The
// zero level is low.
func (l ChatLevel) Threshold() float64 {
	switch l {
	case ChatOff:
		return 0
	case ChatMedium:
		return 0.88
	case ChatHigh:
		return 0.80
	case ChatNoLimit:
		return 0.70
	}
	return 0.95
}

// Proactive holds the switches for unprompted group replies. The router
// reads them through [Rules.Proactive]; the proactive-switch gate (G10)
// stops unprompted messages when both switches are off.
type Proactive struct {
	// AnswerQuestions lets the router pass a message it rates as directed
	// at the bot (default on).
	AnswerQuestions Toggle
	// ChatIn is the chat-in level (default low; off disables chat-in).
	ChatIn ChatLevel
	// ChatThreshold overrides the level's threshold when > 0.
	ChatThreshold float64
	// ChatCooldown is the pause after a sent chat-in reply (default 30 s).
	ChatCooldown time.Duration
	// Criteria is extra text for the router about what this group wants
	// the bot to answer.
	Criteria string
}

// On reports whether either proactive switch is on.
func (p Proactive) On() bool { return p.AnswerQuestions.Or(true) || p.chatLevel() != ChatOff }

// Threshold is the effective minimum chat-in score.
func (p Proactive) Threshold() float64 {
	if p.ChatThreshold > 0 {
		return p.ChatThreshold
	}
	return p.chatLevel().Threshold()
}

// Resolved returns p with every default filled in: AnswerQuestions on or
// off, ChatIn set, ChatThreshold the effective threshold and ChatCooldown
// the effective cooldown.
func (p Proactive) Resolved() Proactive {
	p.ChatThreshold = p.Threshold()
	p.ChatIn = p.chatLevel()
	if p.AnswerQuestions.Or(true) {
		p.AnswerQuestions = ToggleOn
	} else {
		p.AnswerQuestions = ToggleOff
	}
	if p.ChatCooldown <= 0 {
		p.ChatCooldown = DefaultChatCooldown
	}
	return p
}

func (p Proactive) chatLevel() ChatLevel {
	if p.ChatIn == "" {
		return ChatLow
	}
	return p.ChatIn
}

// over returns p with the fields set in o replacing its own; Criteria is
// appended.
func (p Proactive) over(o Proactive) Proactive {
	if o.AnswerQuestions != "" {
		p.AnswerQuestions = o.AnswerQuestions
	}
	if o.ChatIn != "" {
		p.ChatIn = o.ChatIn
	}
	if o.ChatThreshold > 0 {
		p.ChatThreshold = o.ChatThreshold
	}
	if o.ChatCooldown > 0 {
		p.ChatCooldown = o.ChatCooldown
	}
	if o.Criteria != "" {
		if p.Criteria != "" {
			p.Criteria += "\n"
		}
		p.Criteria += o.Criteria
	}
	return p
}

func (p Proactive) validate(where string) error {
	switch {
	case !p.AnswerQuestions.Valid():
		return fmt.Errorf("%s: AnswerQuestions %q is not on or off", where, p.AnswerQuestions)
	case !p.ChatIn.Valid():
		return fmt.Errorf("%s: unknown ChatIn level %q", where, p.ChatIn)
	case p.ChatThreshold < 0 || p.ChatThreshold > 1:
		return fmt.Errorf("%s: ChatThreshold %v is outside [0,1]", where, p.ChatThreshold)
	case p.ChatCooldown < 0:
		return fmt.Errorf("%s: negative ChatCooldown %s", where, p.ChatCooldown)
	}
	return nil
}

// Quotas are daily model-call limits (G5). In a Policy, 0 means
// unlimited. In a GroupPolicy, 0 means "as the bot's policy says" and a
// negative value means unlimited in that group; Bot is ignored there.
type Quotas struct {
	// Bot limits the bot's calls across all chats.
	Bot int
	// Group limits the calls made for one group.
	Group int
	// User limits the calls made for one sender (in all chats).
	User int
}

// Policy is the per-bot reply policy. The zero Policy is the default one:
// enabled, every group open, nobody blocked, always active, no member
// level, bot senders only on a direct trigger, every unprompted message
// routed, no quota, answer questions on, chat-in low.
type Policy struct {
	// Disabled switches the bot off (G2).
	Disabled bool

	// GroupAdmission selects open groups or a group allowlist (G3).
	GroupAdmission GroupAdmission
	// GroupAllowlist lists the admitted group ids in allowlist mode.
	GroupAllowlist []string
	// DisabledGroups lists group ids the bot never answers in.
	DisabledGroups []string

	// BlockedUsers are never answered; AllowedUsers, when not empty, are
	// the only senders answered; ExemptUsers skip active hours and the
	// member level (G9). Owners bypass the whole reply gate.
	BlockedUsers []string
	AllowedUsers []string
	ExemptUsers  []string

	// ActiveHours limits replies to a daily window, "HH:MM-HH:MM"
	// (overnight allowed; "" = always).
	ActiveHours string
	// Zone is the IANA zone of ActiveHours and of the quota day
	// ("" = UTC).
	Zone string
	// QuietReply is sent, at most once per QuietReplyInterval per chat, to
	// a direct message outside the active hours ("" = stay silent).
	QuietReply string
	// QuietReplyInterval is the least time between two quiet replies in
	// one chat (1 h).
	QuietReplyInterval time.Duration

	// MinMemberLevel is the lowest group member level answered (0 = off).
	// Group owners and admins always pass.
	MinMemberLevel int
	// LevelUnknown decides when the level stays unknown (default allow).
	LevelUnknown LevelPolicy
	// MemberCacheTTL is how long a looked-up level is reused (10 min).
	MemberCacheTTL time.Duration

	// BotChat says when senders flagged as bots are answered (default
	// mentions).
	BotChat BotChatMode

	// SamplingRate is the share of unprompted group messages that go on to
	// the router, in (0,1] (0 = 1.0, all). Owners are exempt.
	SamplingRate float64

	// StopWindow is the length of a group stop window (10 min); used by
	// [Rules.OpenStopWindow].
	StopWindow time.Duration

	// Quota limits model calls per day.
	Quota Quotas

	// Proactive holds the proactive switches.
	Proactive Proactive
}

// GroupPolicy overrides the bot's Policy for one group. Zero fields keep
// the bot's setting; user lists are added to the bot's lists.
type GroupPolicy struct {
	// Disabled switches the bot off in this group.
	Disabled bool

	// BlockedUsers, AllowedUsers and ExemptUsers are added to the bot's.
	BlockedUsers []string
	AllowedUsers []string
	ExemptUsers  []string

	// ActiveHours and Zone replace the bot's ("00:00-24:00" = always).
	ActiveHours string
	Zone        string
	// QuietReply replaces the bot's quiet-hours text.
	QuietReply string

	// MinMemberLevel replaces the bot's (0 = keep, negative = off).
	MinMemberLevel int
	// LevelUnknown replaces the bot's policy.
	LevelUnknown LevelPolicy

	// BotChat replaces the bot's mode.
	BotChat BotChatMode

	// SamplingRate replaces the bot's, in (0,1] (0 = keep).
	SamplingRate float64

	// Quota: Group and User replace the bot's (0 = keep, negative =
	// unlimited).
	Quota Quotas

	// Proactive: set fields replace the bot's; Criteria is appended.
	Proactive Proactive
}

// Config configures the default gates built by [Compile] and [Default].
type Config struct {
	// Policy is the bot's policy.
	Policy Policy
	// Groups holds per-group overrides. A key is a group chat id
	// (Event.Chat.ID), or "<platform>:<chat id>" to target one platform;
	// the platform-qualified key wins.
	Groups map[string]GroupPolicy
	// Flags holds the session flags (required).
	Flags Flags
	// Quota reads the model-call counters (required when a quota is set;
	// [NewFlagQuota] keeps them in Flags).
	Quota Quota
	// NoRouter says that no router is configured, so unprompted messages
	// stop at G10 with ignored_proactive_off.
	NoRouter bool
	// Clock is the time source of the member-level cache (nil = the wall
	// clock). Decisions use Turn.Now.
	Clock clock.Clock
	// Logger receives diagnostics (nil = discard).
	Logger *slog.Logger
}

// ErrInvalidConfig is wrapped by every error Compile returns for a bad
// Config.
var ErrInvalidConfig = errors.New("gate: invalid config")

// effective is a policy resolved for one group (or for private chats and
// unlisted groups), with everything parsed.
type effective struct {
	groupDisabled bool
	blocked       set
	allowed       set
	exempt        set
	hours         Hours
	zone          *time.Location
	quietReply    string
	minLevel      int
	levelDeny     bool
	botChat       BotChatMode
	sampling      float64
	quota         Quotas
	proactive     Proactive
}

// set is a string set; a nil set is empty.
type set map[string]struct{}

func makeSet(lists ...[]string) set {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	if n == 0 {
		return nil
	}
	s := make(set, n)
	for _, l := range lists {
		for _, x := range l {
			s[x] = struct{}{}
		}
	}
	return s
}

func (s set) has(x string) bool {
	_, ok := s[x]
	return ok
}

func loadZone(name, where string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%s: zone %q: %w", where, name, err)
	}
	return loc, nil
}

// compileBot resolves the bot's own policy (private chats, unlisted
// groups).
func compileBot(p Policy) (*effective, error) {
	switch {
	case !p.GroupAdmission.Valid():
		return nil, fmt.Errorf("policy: unknown GroupAdmission %q", p.GroupAdmission)
	case !p.LevelUnknown.Valid():
		return nil, fmt.Errorf("policy: unknown LevelUnknown %q", p.LevelUnknown)
	case !p.BotChat.Valid():
		return nil, fmt.Errorf("policy: unknown BotChat %q", p.BotChat)
	case p.SamplingRate < 0 || p.SamplingRate > 1:
		return nil, fmt.Errorf("policy: SamplingRate %v is outside (0,1]", p.SamplingRate)
	case p.MinMemberLevel < 0:
		return nil, fmt.Errorf("policy: negative MinMemberLevel %d", p.MinMemberLevel)
	case p.Quota.Bot < 0 || p.Quota.Group < 0 || p.Quota.User < 0:
		return nil, fmt.Errorf("policy: negative quota %+v (0 = unlimited)", p.Quota)
	case p.QuietReplyInterval < 0 || p.MemberCacheTTL < 0 || p.StopWindow < 0:
		return nil, errors.New("policy: negative duration")
	}
	if err := p.Proactive.validate("policy"); err != nil {
		return nil, err
	}
	e := &effective{
		blocked: makeSet(p.BlockedUsers), allowed: makeSet(p.AllowedUsers), exempt: makeSet(p.ExemptUsers),
		quietReply: p.QuietReply, minLevel: p.MinMemberLevel, levelDeny: p.LevelUnknown == LevelDeny,
		botChat: p.BotChat, sampling: p.SamplingRate, quota: p.Quota, proactive: p.Proactive,
	}
	if e.botChat == "" {
		e.botChat = BotChatMentions
	}
	if e.sampling == 0 {
		e.sampling = 1
	}
	var err error
	if e.zone, err = loadZone(p.Zone, "policy"); err != nil {
		return nil, err
	}
	if p.ActiveHours != "" {
		if e.hours, err = ParseHours(p.ActiveHours); err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
	}
	return e, nil
}

// compileGroup resolves a group's policy on top of the bot's.
func compileGroup(bot *effective, p Policy, key string, g GroupPolicy) (*effective, error) {
	where := fmt.Sprintf("group %q", key)
	switch {
	case !g.LevelUnknown.Valid():
		return nil, fmt.Errorf("%s: unknown LevelUnknown %q", where, g.LevelUnknown)
	case !g.BotChat.Valid():
		return nil, fmt.Errorf("%s: unknown BotChat %q", where, g.BotChat)
	case g.SamplingRate < 0 || g.SamplingRate > 1:
		return nil, fmt.Errorf("%s: SamplingRate %v is outside (0,1]", where, g.SamplingRate)
	}
	if err := g.Proactive.validate(where); err != nil {
		return nil, err
	}
	e := *bot
	e.groupDisabled = g.Disabled
	e.blocked = makeSet(p.BlockedUsers, g.BlockedUsers)
	e.allowed = makeSet(p.AllowedUsers, g.AllowedUsers)
	e.exempt = makeSet(p.ExemptUsers, g.ExemptUsers)
	if g.QuietReply != "" {
		e.quietReply = g.QuietReply
	}
	switch {
	case g.MinMemberLevel < 0:
		e.minLevel = 0
	case g.MinMemberLevel > 0:
		e.minLevel = g.MinMemberLevel
	}
	if g.LevelUnknown != "" {
		e.levelDeny = g.LevelUnknown == LevelDeny
	}
	if g.BotChat != "" {
		e.botChat = g.BotChat
	}
	if g.SamplingRate > 0 {
		e.sampling = g.SamplingRate
	}
	override := func(dst *int, v int) {
		switch {
		case v < 0:
			*dst = 0
		case v > 0:
			*dst = v
		}
	}
	override(&e.quota.Group, g.Quota.Group)
	override(&e.quota.User, g.Quota.User)
	e.proactive = bot.proactive.over(g.Proactive)
	var err error
	if g.Zone != "" {
		if e.zone, err = loadZone(g.Zone, where); err != nil {
			return nil, err
		}
	}
	if g.ActiveHours != "" {
		if e.hours, err = ParseHours(g.ActiveHours); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	return &e, nil
}

// groupKey splits a Config.Groups key into platform ("" for any) and id.
func groupKey(key string) (platform, id string) {
	if p, id, ok := strings.Cut(key, ":"); ok {
		return p, id
	}
	return "", key
}

// policies resolves effective policies by event.
type policies struct {
	bot    *effective
	groups map[string]map[string]*effective // platform ("" = any) → group id
}

func compilePolicies(cfg Config) (*policies, error) {
	bot, err := compileBot(cfg.Policy)
	if err != nil {
		return nil, err
	}
	ps := &policies{bot: bot, groups: map[string]map[string]*effective{}}
	for key, g := range cfg.Groups {
		platform, id := groupKey(key)
		if id == "" {
			return nil, fmt.Errorf("group key %q has no group id", key)
		}
		e, err := compileGroup(bot, cfg.Policy, key, g)
		if err != nil {
			return nil, err
		}
		if ps.groups[platform] == nil {
			ps.groups[platform] = map[string]*effective{}
		}
		ps.groups[platform][id] = e
	}
	return ps, nil
}

// lookup returns the policy of the event's chat. Private chats use the
// bot's policy.
func (ps *policies) lookup(ev *channel.Event) *effective {
	if ev.Chat.Kind != channel.Group {
		return ps.bot
	}
	if e := ps.groups[ev.Platform][ev.Chat.ID]; e != nil {
		return e
	}
	if e := ps.groups[""][ev.Chat.ID]; e != nil {
		return e
	}
	return ps.bot
}
