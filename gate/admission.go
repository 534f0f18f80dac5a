package gate

import (
	"fmt"
	"slices"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outcome"
)

// IgnoredPrivateAdmission is the code for a private chat refused by the
// admission mode (an alias of the shared constant).
const IgnoredPrivateAdmission = outcome.IgnoredPrivateAdmission

// Admission is the private-chat admission mode.
type Admission string

// The admission modes. The zero value means AdmitEveryone.
const (
	AdmitEveryone  Admission = "everyone"
	AdmitOwnerOnly Admission = "owner_only"
	AdmitAllowlist Admission = "allowlist"
)

// Valid reports whether a is a known mode (or empty).
func (a Admission) Valid() bool {
	switch a {
	case "", AdmitEveryone, AdmitOwnerOnly, AdmitAllowlist:
		return true
	}
	return false
}

// AdmissionPolicy decides who may talk to the bot in private (check I3; it
// runs in the pipeline's HandleEvent, before anything is queued).
type AdmissionPolicy struct {
	// Mode is the admission mode (zero = everyone).
	Mode Admission
	// Owners always pass.
	Owners []string
	// Allowlist is consulted in AdmitAllowlist mode.
	Allowlist []string
}

// Admit returns Pass, or a stop with IgnoredPrivateAdmission. Group events
// always pass.
func (p AdmissionPolicy) Admit(ev *channel.Event) Verdict {
	if ev.Chat.Kind != channel.Private || slices.Contains(p.Owners, ev.Sender.ID) {
		return Pass
	}
	switch p.Mode {
	case AdmitOwnerOnly:
		return Stopped(IgnoredPrivateAdmission, "private chat is open to the owner only")
	case AdmitAllowlist:
		if !slices.Contains(p.Allowlist, ev.Sender.ID) {
			return Stopped(IgnoredPrivateAdmission, fmt.Sprintf("sender %s is not on the private-chat allowlist", ev.Sender.ID))
		}
	}
	return Pass
}
