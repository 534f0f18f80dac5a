package gate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate"
)

func TestAdmissionValid(t *testing.T) {
	t.Parallel()
	for _, a := range []gate.Admission{"", gate.AdmitEveryone, gate.AdmitOwnerOnly, gate.AdmitAllowlist} {
		require.True(t, a.Valid(), "%q", a)
	}
	for _, a := range []gate.Admission{"owner", "Everyone", "allow_list", " everyone"} {
		require.False(t, a.Valid(), "%q", a)
	}
}

func TestAdmissionPolicyAdmit(t *testing.T) {
	t.Parallel()
	owners := []string{"owner1", "owner2"}
	allow := []string{"friend"}
	tests := []struct {
		name   string
		policy gate.AdmissionPolicy
		kind   channel.ChatKind
		sender string
		stop   bool
	}{
		// everyone (and the zero value)
		{name: "zero mode, stranger", policy: gate.AdmissionPolicy{}, kind: channel.Private, sender: "x"},
		{name: "everyone, stranger", policy: gate.AdmissionPolicy{Mode: gate.AdmitEveryone}, kind: channel.Private, sender: "x"},
		{name: "everyone, owner", policy: gate.AdmissionPolicy{Mode: gate.AdmitEveryone, Owners: owners}, kind: channel.Private, sender: "owner1"},

		// owner only
		{name: "owner only, stranger", policy: gate.AdmissionPolicy{Mode: gate.AdmitOwnerOnly, Owners: owners}, kind: channel.Private, sender: "x", stop: true},
		{name: "owner only, allowlisted", policy: gate.AdmissionPolicy{Mode: gate.AdmitOwnerOnly, Owners: owners, Allowlist: allow}, kind: channel.Private, sender: "friend", stop: true},
		{name: "owner only, first owner", policy: gate.AdmissionPolicy{Mode: gate.AdmitOwnerOnly, Owners: owners}, kind: channel.Private, sender: "owner1"},
		{name: "owner only, second owner", policy: gate.AdmissionPolicy{Mode: gate.AdmitOwnerOnly, Owners: owners}, kind: channel.Private, sender: "owner2"},
		{name: "owner only, no owners configured", policy: gate.AdmissionPolicy{Mode: gate.AdmitOwnerOnly}, kind: channel.Private, sender: "x", stop: true},
		{name: "owner only, group", policy: gate.AdmissionPolicy{Mode: gate.AdmitOwnerOnly, Owners: owners}, kind: channel.Group, sender: "x"},

		// allowlist
		{name: "allowlist, listed", policy: gate.AdmissionPolicy{Mode: gate.AdmitAllowlist, Allowlist: allow}, kind: channel.Private, sender: "friend"},
		{name: "allowlist, stranger", policy: gate.AdmissionPolicy{Mode: gate.AdmitAllowlist, Allowlist: allow}, kind: channel.Private, sender: "x", stop: true},
		{name: "allowlist, owner not listed", policy: gate.AdmissionPolicy{Mode: gate.AdmitAllowlist, Owners: owners, Allowlist: allow}, kind: channel.Private, sender: "owner2"},
		{name: "allowlist, empty list", policy: gate.AdmissionPolicy{Mode: gate.AdmitAllowlist}, kind: channel.Private, sender: "friend", stop: true},
		{name: "allowlist, group", policy: gate.AdmissionPolicy{Mode: gate.AdmitAllowlist, Allowlist: allow}, kind: channel.Group, sender: "x"},
		{name: "allowlist, empty sender", policy: gate.AdmissionPolicy{Mode: gate.AdmitAllowlist, Allowlist: allow}, kind: channel.Private, sender: "", stop: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := tt.policy.Admit(event(tt.kind, tt.sender))
			if !tt.stop {
				require.Equal(t, gate.Pass, v)
				return
			}
			require.True(t, v.Stop)
			require.Equal(t, gate.IgnoredPrivateAdmission, v.Code)
			require.NotEmpty(t, v.Reason)
		})
	}
}

func TestAdmissionPolicyReasonNamesSender(t *testing.T) {
	t.Parallel()
	v := gate.AdmissionPolicy{Mode: gate.AdmitAllowlist}.Admit(event(channel.Private, "u77"))
	require.Contains(t, v.Reason, "u77")
	v = gate.AdmissionPolicy{Mode: gate.AdmitOwnerOnly}.Admit(event(channel.Private, "u77"))
	require.Contains(t, v.Reason, "owner")
}
