package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/personakit/persona/gate"
)

// fileConfig is the -config file: the bot's reply policy, per-group
// overrides and private-chat admission (see the package documentation).
type fileConfig struct {
	Policy           policyJSON           `json:"policy"`
	Groups           map[string]groupJSON `json:"groups"`
	PrivateAdmission string               `json:"private_admission"`
	PrivateAllowlist []string             `json:"private_allowlist"`
}

// duration is a time.Duration written as a Go duration string ("90s").
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a string such as \"30s\" or \"1h\", not %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

type quotaJSON struct {
	Bot   int `json:"bot"`
	Group int `json:"group"`
	User  int `json:"user"`
}

type proactiveJSON struct {
	AnswerQuestions string   `json:"answer_questions"`
	ChatIn          string   `json:"chat_in"`
	ChatThreshold   float64  `json:"chat_threshold"`
	ChatCooldown    duration `json:"chat_cooldown"`
	Criteria        string   `json:"criteria"`
}

func (p proactiveJSON) toGate() gate.Proactive {
	return gate.Proactive{
		AnswerQuestions: gate.Toggle(p.AnswerQuestions), ChatIn: gate.ChatLevel(p.ChatIn),
		ChatThreshold: p.ChatThreshold, ChatCooldown: time.Duration(p.ChatCooldown), Criteria: p.Criteria,
	}
}

type policyJSON struct {
	Disabled           bool          `json:"disabled"`
	GroupAdmission     string        `json:"group_admission"`
	GroupAllowlist     []string      `json:"group_allowlist"`
	DisabledGroups     []string      `json:"disabled_groups"`
	BlockedUsers       []string      `json:"blocked_users"`
	AllowedUsers       []string      `json:"allowed_users"`
	ExemptUsers        []string      `json:"exempt_users"`
	ActiveHours        string        `json:"active_hours"`
	Zone               string        `json:"zone"`
	QuietReply         string        `json:"quiet_reply"`
	QuietReplyInterval duration      `json:"quiet_reply_interval"`
	MinMemberLevel     int           `json:"min_member_level"`
	LevelUnknown       string        `json:"level_unknown"`
	MemberCacheTTL     duration      `json:"member_cache_ttl"`
	BotChat            string        `json:"bot_chat"`
	SamplingRate       float64       `json:"sampling_rate"`
	StopWindow         duration      `json:"stop_window"`
	Quota              quotaJSON     `json:"quota"`
	Proactive          proactiveJSON `json:"proactive"`
}

func (p policyJSON) toGate() gate.Policy {
	return gate.Policy{
		Disabled:       p.Disabled,
		GroupAdmission: gate.GroupAdmission(p.GroupAdmission), GroupAllowlist: trimGroups(p.GroupAllowlist),
		DisabledGroups: trimGroups(p.DisabledGroups),
		BlockedUsers:   p.BlockedUsers, AllowedUsers: p.AllowedUsers, ExemptUsers: p.ExemptUsers,
		ActiveHours: p.ActiveHours, Zone: p.Zone, QuietReply: p.QuietReply,
		QuietReplyInterval: time.Duration(p.QuietReplyInterval),
		MinMemberLevel:     p.MinMemberLevel, LevelUnknown: gate.LevelPolicy(p.LevelUnknown),
		MemberCacheTTL: time.Duration(p.MemberCacheTTL),
		BotChat:        gate.BotChatMode(p.BotChat), SamplingRate: p.SamplingRate,
		StopWindow: time.Duration(p.StopWindow),
		Quota:      gate.Quotas{Bot: p.Quota.Bot, Group: p.Quota.Group, User: p.Quota.User},
		Proactive:  p.Proactive.toGate(),
	}
}

type groupQuotaJSON struct {
	Group int `json:"group"`
	User  int `json:"user"`
}

type groupJSON struct {
	Disabled       bool           `json:"disabled"`
	BlockedUsers   []string       `json:"blocked_users"`
	AllowedUsers   []string       `json:"allowed_users"`
	ExemptUsers    []string       `json:"exempt_users"`
	ActiveHours    string         `json:"active_hours"`
	Zone           string         `json:"zone"`
	QuietReply     string         `json:"quiet_reply"`
	MinMemberLevel int            `json:"min_member_level"`
	LevelUnknown   string         `json:"level_unknown"`
	BotChat        string         `json:"bot_chat"`
	SamplingRate   float64        `json:"sampling_rate"`
	Quota          groupQuotaJSON `json:"quota"`
	Proactive      proactiveJSON  `json:"proactive"`
}

func (g groupJSON) toGate() gate.GroupPolicy {
	return gate.GroupPolicy{
		Disabled:     g.Disabled,
		BlockedUsers: g.BlockedUsers, AllowedUsers: g.AllowedUsers, ExemptUsers: g.ExemptUsers,
		ActiveHours: g.ActiveHours, Zone: g.Zone, QuietReply: g.QuietReply,
		MinMemberLevel: g.MinMemberLevel, LevelUnknown: gate.LevelPolicy(g.LevelUnknown),
		BotChat: gate.BotChatMode(g.BotChat), SamplingRate: g.SamplingRate,
		Quota:     gate.Quotas{Group: g.Quota.Group, User: g.Quota.User},
		Proactive: g.Proactive.toGate(),
	}
}

// trimGroups accepts "group:100" for "100" in group lists.
func trimGroups(ids []string) []string {
	if ids == nil {
		return nil
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strings.TrimPrefix(id, "group:")
	}
	return out
}

// policy is what the simulator hands to persona.Options.
type policy struct {
	bot              gate.Policy
	groups           map[string]gate.GroupPolicy
	privateAdmission gate.Admission
	privateAllowlist []string
}

// loadConfig reads a -config file ("" = the defaults).
func loadConfig(path string) (policy, error) {
	if path == "" {
		return policy{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return policy{}, fmt.Errorf("-config: %w", err)
	}
	p, err := parseConfig(b)
	if err != nil {
		return policy{}, fmt.Errorf("-config %s: %w", path, err)
	}
	return p, nil
}

func parseConfig(b []byte) (policy, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var fc fileConfig
	if err := dec.Decode(&fc); err != nil {
		return policy{}, jsonError(b, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return policy{}, errors.New("text after the JSON object")
	}
	p := policy{bot: fc.Policy.toGate(), privateAdmission: gate.Admission(fc.PrivateAdmission),
		privateAllowlist: fc.PrivateAllowlist}
	if !p.privateAdmission.Valid() {
		return policy{}, fmt.Errorf("private_admission %q is not everyone, owner_only or allowlist", fc.PrivateAdmission)
	}
	if !p.bot.Proactive.ChatIn.Valid() {
		return policy{}, fmt.Errorf("policy.proactive.chat_in %q is not %s", fc.Policy.Proactive.ChatIn, levelNames)
	}
	for key, g := range fc.Groups {
		id := strings.TrimPrefix(key, "group:")
		if id == "" || strings.Contains(id, ":") {
			return policy{}, fmt.Errorf("groups: key %q is not a group id (\"200\" or \"group:200\")", key)
		}
		if _, dup := p.groups[id]; dup {
			return policy{}, fmt.Errorf("groups: group %q is listed twice", id)
		}
		if !gate.ChatLevel(g.Proactive.ChatIn).Valid() {
			return policy{}, fmt.Errorf("groups.%s.proactive.chat_in %q is not %s", key, g.Proactive.ChatIn, levelNames)
		}
		if p.groups == nil {
			p.groups = map[string]gate.GroupPolicy{}
		}
		p.groups[id] = g.toGate()
	}
	return p, nil
}

// jsonError adds the line of a syntax or type error.
func jsonError(b []byte, err error) error {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	if off < 0 || off > int64(len(b)) {
		return err
	}
	return fmt.Errorf("line %d: %w", 1+bytes.Count(b[:off], []byte("\n")), err)
}
