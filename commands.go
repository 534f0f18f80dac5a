package persona

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/route"
)

// Command is a chat command answered in code, without the chat model: a
// message that starts with the command prefix ("/" by default) and the
// command's name. Register yours in Options.Commands.
type Command struct {
	// Name is the command without its prefix: letters, digits, '_' and
	// '-', matched case-insensitively. It may not be one of the built-in
	// commands (see BuiltinCommands).
	Name string
	// Usage is one line for the owner's /help ("/roll [sides] – roll a
	// die").
	Usage string
	// OwnerOnly restricts the command to the owners. Anyone else's
	// message that starts with it is an ordinary message.
	OwnerOnly bool
	// Run answers the command. The returned text is sent as the reply
	// (through the same exit as every reply: secrets masked, once only);
	// "" sends nothing and records handled_command. An error sends a
	// short failure line and is recorded with the message. Run is called
	// again if the process stops before the reply was stored, so make its
	// effects idempotent.
	Run func(ctx context.Context, c *CommandCall) (string, error)
}

// CommandCall is one invocation of a Command.
type CommandCall struct {
	// Name is the command's name as registered.
	Name string
	// Args is the text after the command's name, trimmed.
	Args string
	// Event is the message (real platform ids: this is the embedder's own
	// code, not a model).
	Event channel.Event
	// SessionKey is the chat's session.
	SessionKey string
	// Owner tells whether an owner sent it.
	Owner bool
}

// builtinCommands are the built-in commands' names.
var builtinCommands = []string{"status", "send", "pause", "resume", "why", "welcome", "schedule", "help", "forget"}

// BuiltinCommands returns the names of the built-in commands, which
// Options.Commands may not reuse. The owner's: status, send, pause,
// resume, why, welcome, schedule and help; anyone's: forget ("/forget
// me").
func BuiltinCommands() []string { return slices.Clone(builtinCommands) }

// The outcome codes of commands.
const (
	// RepliedCommand: a chat command was answered without the chat model.
	RepliedCommand outcome.Code = "replied_command"
	// HandledCommand: a chat command ran and had nothing to say.
	HandledCommand outcome.Code = "handled_command"
)

// MaxPauseMinutes bounds the owner's /pause.
const MaxPauseMinutes = 7 * 24 * 60

// commandFailed is the reply to a command whose Run failed.
const commandFailed = "That command failed; the reason is in the log and the event center."

// validateCommands checks Options.Commands.
func validateCommands(cmds []Command) error {
	seen := map[string]bool{}
	for i, c := range cmds {
		name := strings.ToLower(c.Name)
		switch {
		case name == "":
			return fmt.Errorf("persona: Options.Commands[%d] has no name", i)
		case strings.IndexFunc(name, func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '-'
		}) >= 0:
			return fmt.Errorf("persona: command name %q may hold only letters, digits, '_' and '-'", c.Name)
		case slices.Contains(builtinCommands, name):
			return fmt.Errorf("persona: command name %q is a built-in command", c.Name)
		case seen[name]:
			return fmt.Errorf("persona: command %q is registered twice", c.Name)
		case c.Run == nil:
			return fmt.Errorf("persona: command %q has no Run", c.Name)
		}
		seen[name] = true
	}
	return nil
}

// publicCommands are the command names anyone may use: they make the
// plugin-command trigger fire.
func publicCommands(cmds []Command) []string {
	out := []string{"forget"}
	for _, c := range cmds {
		if !c.OwnerOnly {
			out = append(out, strings.ToLower(c.Name))
		}
	}
	return out
}

// command answers a message the owner-command or plugin-command trigger
// matched; handled is false when the message should go on as an ordinary
// one (a command it does not know from someone who is not an owner).
func (p *Pipeline) command(ctx context.Context, l inbound.Lease, owner bool, tr *turnTrail) (act action, handled bool) {
	ev := &l.Event
	name, args := route.Command(ev, p.identity.CommandPrefix)
	var (
		text string
		err  error
		code = RepliedCommand
	)
	custom := p.findCommand(name)
	switch {
	case custom != nil && (owner || !custom.OwnerOnly):
		text, err = custom.Run(ctx, &CommandCall{Name: custom.Name, Args: args, Event: l.Event, SessionKey: l.SessionKey, Owner: owner})
	case name == "forget":
		text, err = p.forgetCommand(ctx, ev, args)
	case !owner:
		return action{}, false
	default:
		text, err = p.ownerCommand(ctx, l, name, args)
	}
	tr.Command = name
	reason := "command /" + name
	if err != nil {
		if ctx.Err() != nil {
			return action{kind: actRelease}, true
		}
		p.log.Warn("command failed", "command", name, "id", l.ID, "err", err)
		text, reason = commandFailed, reason+" failed: "+err.Error()
		code = outcome.RepliedError
	}
	if text == "" {
		return complete(HandledCommand, reason+" (nothing to say)"), true
	}
	// A command's answer is not held back by a pause: it may be the
	// owner's /pause itself.
	return p.deliverGuarded(ctx, l, outbound.Verdict{Send: true, Text: text, Code: code, Reason: reason}, inbound.Outcome{}, nil, false), true
}

func (p *Pipeline) findCommand(name string) *Command {
	for i := range p.opt.Commands {
		if strings.EqualFold(p.opt.Commands[i].Name, name) {
			return &p.opt.Commands[i]
		}
	}
	return nil
}

// ownerCommand runs one of the owner's built-in commands.
func (p *Pipeline) ownerCommand(ctx context.Context, l inbound.Lease, name, args string) (string, error) {
	now := p.clk.Now()
	group := l.Event.Chat.Kind == channel.Group
	switch name {
	case "status":
		return p.statusCommand(ctx, now)
	case "send":
		if !group {
			return "/send switches proactive replies of a group; use it in the group.", nil
		}
		mode := strings.ToLower(args)
		if mode != gate.SendOn && mode != gate.SendOff && mode != gate.SendInherit {
			return "Usage: /send on|off|inherit", nil
		}
		if err := gate.SetSendMode(ctx, p.flags, l.SessionKey, mode); err != nil {
			return "", err
		}
		switch mode {
		case gate.SendOn:
			return "Proactive replies are on in this group.", nil
		case gate.SendOff:
			return "Proactive replies are off in this group; I answer only when addressed.", nil
		}
		return "Proactive replies in this group follow the configured policy again.", nil
	case "pause":
		n, err := strconv.Atoi(strings.TrimSpace(args))
		if err != nil || n < 1 || n > MaxPauseMinutes {
			return fmt.Sprintf("Usage: /pause MINUTES (1 to %d)", MaxPauseMinutes), nil
		}
		until := now.Add(time.Duration(n) * time.Minute)
		if err := p.flags.SetFlag(ctx, gate.Flag{SessionKey: l.SessionKey, Name: gate.FlagSuppressed, Until: until,
			Value: "paused by the owner (/pause)"}); err != nil {
			return "", err
		}
		return fmt.Sprintf("Paused here for %d minute(s), until %s. /resume ends it.", n, until.In(p.zone()).Format("15:04 MST")), nil
	case "resume":
		if err := p.flags.ClearFlag(ctx, l.SessionKey, "", gate.FlagSuppressed); err != nil {
			return "", err
		}
		return "Resumed.", nil
	case "why":
		return p.whyCommand(ctx, l)
	case "schedule":
		return p.scheduleCommand(ctx, l, args)
	case "welcome":
		if !group {
			return "/welcome switches welcome messages of a group; use it in the group.", nil
		}
		switch strings.ToLower(args) {
		case "on":
			return "New members of this group are welcomed.", p.flags.SetFlag(ctx, gate.Flag{SessionKey: l.SessionKey,
				Name: flagWelcome, Until: time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC), Value: "on"})
		case "off":
			return "New members of this group are no longer welcomed.", p.flags.ClearFlag(ctx, l.SessionKey, "", flagWelcome)
		}
		return "Usage: /welcome on|off", nil
	}
	return p.helpText(true), nil
}

// helpText lists the commands a sender may use.
func (p *Pipeline) helpText(owner bool) string {
	prefix := p.identity.CommandPrefix
	if prefix == "" {
		prefix = route.DefaultCommandPrefix
	}
	var b strings.Builder
	b.WriteString("Commands:")
	line := func(s string) { b.WriteString("\n" + prefix + s) }
	if owner {
		line("status – uptime, queue, today's outcomes and tokens")
		line("send on|off|inherit – proactive replies in this group")
		line("pause MINUTES – stop replying here for a while; resume – end the pause")
		line("why – why the last message here got the outcome it got")
		line("welcome on|off – welcome new members of this group")
		line("schedule [list | add ID SPEC [ZONE] | PROMPT | remove ID] – scheduled messages in this chat")
	}
	line("forget me – delete what I remember about you")
	for _, c := range p.opt.Commands {
		if owner || !c.OwnerOnly {
			if c.Usage != "" {
				line(strings.TrimPrefix(c.Usage, prefix))
			} else {
				line(c.Name)
			}
		}
	}
	return b.String()
}

// statusCommand reports uptime, the queue and today's outcomes and tokens.
func (p *Pipeline) statusCommand(ctx context.Context, now time.Time) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Up %s.", now.Sub(p.started).Round(time.Second))
	if p.records == nil {
		return b.String(), nil
	}
	local := now.In(p.zone())
	midnight := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, p.zone())
	sum, err := p.records.Summarize(ctx, midnight, now.Add(time.Millisecond))
	if err != nil {
		return "", fmt.Errorf("summarize: %w", err)
	}
	fmt.Fprintf(&b, " Queue: %d waiting or running.", sum.Pending)
	families := map[string]int{}
	total := 0
	for code, n := range sum.Outcomes {
		families[outcome.Family(code)] += n
		total += n
	}
	fmt.Fprintf(&b, "\nToday (since %s): %d message(s)", midnight.Format("2006-01-02 15:04 MST"), total)
	for _, f := range []string{outcome.FamilyReplied, outcome.FamilyIgnored, outcome.FamilyDropped, outcome.FamilyNotice, outcome.FamilyOther} {
		if families[f] > 0 {
			fmt.Fprintf(&b, ", %d %s", families[f], f)
		}
	}
	b.WriteString(".")
	for _, t := range sum.Tokens {
		cached := 0
		if t.Input > 0 {
			cached = t.CachedInput * 100 / t.Input
		}
		fmt.Fprintf(&b, "\nTokens %s: %d call(s), %d in (%d%% cached), %d out.", t.Purpose, t.Calls, t.Input, cached, t.Output)
	}
	return b.String(), nil
}

// whyCommand explains the newest finished message of the chat.
func (p *Pipeline) whyCommand(ctx context.Context, l inbound.Lease) (string, error) {
	if p.records == nil {
		return "No records to read here (the store does not list them).", nil
	}
	page, err := p.records.ListRecords(ctx, inbound.RecordQuery{SessionKey: l.SessionKey, Status: inbound.StatusDone, Limit: 5})
	if err != nil {
		return "", fmt.Errorf("list records: %w", err)
	}
	for _, r := range page.Records {
		if r.ID == l.ID {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Last message (%s)", r.EventTime.In(p.zone()).Format("15:04"))
		if text := excerpt(r.Text, 60); text != "" {
			fmt.Fprintf(&b, " “%s”", text)
		}
		fmt.Fprintf(&b, " → %s", r.Outcome.Code)
		if m := outcome.Meaning(r.Outcome.Code); m != "" {
			fmt.Fprintf(&b, " (%s)", m)
		}
		if r.Outcome.Reason != "" {
			fmt.Fprintf(&b, ". Reason: %s", r.Outcome.Reason)
		}
		if tr := r.Outcome.Trail; tr != nil && tr.StoppedBy != "" {
			fmt.Fprintf(&b, ". Stopped by the %s gate", tr.StoppedBy)
		}
		b.WriteString(".")
		return b.String(), nil
	}
	return "Nothing has been decided in this chat yet.", nil
}

// excerpt returns the first n runes of s on one line.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// forgetCommand deletes what long-term memory holds about the sender.
func (p *Pipeline) forgetCommand(ctx context.Context, ev *channel.Event, args string) (string, error) {
	if !strings.EqualFold(strings.TrimSpace(args), "me") {
		return "Usage: /forget me", nil
	}
	if p.facts == nil {
		return "I keep no long-term memory about anyone.", nil
	}
	res, err := p.facts.ForgetUser(ctx, ev.Platform, ev.Sender.ID, memory.ForgetOptions{ExcludeHistory: true})
	if err != nil {
		return "", fmt.Errorf("forget user: %w", err)
	}
	return memory.ForgetReply(res), nil
}
