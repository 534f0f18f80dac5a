package gate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/gate"
)

func TestParseHours(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // "" = error
		err  string
	}{
		{in: "09:00-23:00", want: "09:00-23:00"},
		{in: "9:00-23:30", want: "09:00-23:30"},
		{in: "22:00-06:00", want: "22:00-06:00"},
		{in: " 08:15 – 17:45 ", want: "08:15-17:45"},
		{in: "08:00—12:00", want: "08:00-12:00"},
		{in: "08:00~12:00", want: "08:00-12:00"},
		{in: "00:00-24:00", want: "00:00-24:00"},
		{in: "23:59-00:00", want: "23:59-00:00"},
		{in: "", err: "want HH:MM-HH:MM"},
		{in: "09:00", err: "want HH:MM-HH:MM"},
		{in: "09:00-", err: "want HH:MM-HH:MM"},
		{in: "9-17", err: "is not HH:MM"},
		{in: "09:0-17:00", err: "is not HH:MM"},
		{in: "009:00-17:00", err: "is not HH:MM"},
		{in: "ab:cd-17:00", err: "is not HH:MM"},
		{in: "+9:00-17:00", err: "is not HH:MM"},
		{in: "09:60-17:00", err: "minute 60 out of range"},
		{in: "25:00-17:00", err: "hour 25 out of range"},
		{in: "24:00-06:00", err: "hour 24 out of range"},
		{in: "08:00-24:01", err: "hour 24 out of range"},
		{in: "08:00-08:00", err: "equal"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			h, err := gate.ParseHours(tt.in)
			if tt.err != "" {
				require.ErrorIs(t, err, gate.ErrInvalidHours)
				require.ErrorContains(t, err, tt.err)
				require.True(t, h.IsZero())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, h.String())
			require.False(t, h.IsZero())
		})
	}
}

func TestHoursContains(t *testing.T) {
	t.Parallel()
	at := func(hh, mm int) time.Time { return time.Date(2026, 3, 2, hh, mm, 30, 0, time.UTC) }
	tests := []struct {
		window string
		at     time.Time
		want   bool
	}{
		{"09:00-17:00", at(9, 0), true},
		{"09:00-17:00", at(8, 59), false},
		{"09:00-17:00", at(16, 59), true},
		{"09:00-17:00", at(17, 0), false},
		{"22:00-06:00", at(23, 0), true},
		{"22:00-06:00", at(0, 0), true},
		{"22:00-06:00", at(5, 59), true},
		{"22:00-06:00", at(6, 0), false},
		{"22:00-06:00", at(12, 0), false},
		{"22:00-06:00", at(21, 59), false},
		{"00:00-24:00", at(0, 0), true},
		{"00:00-24:00", at(23, 59), true},
		{"", at(3, 0), true},
	}
	for _, tt := range tests {
		var h gate.Hours
		if tt.window != "" {
			var err error
			h, err = gate.ParseHours(tt.window)
			require.NoError(t, err)
		}
		require.Equal(t, tt.want, h.Contains(tt.at), "%s at %s", tt.window, tt.at.Format("15:04"))
	}
}

func TestHoursContainsUsesTheTimesZone(t *testing.T) {
	t.Parallel()
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	h, err := gate.ParseHours("09:00-17:00")
	require.NoError(t, err)
	utc := time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC) // 10:00 in Tokyo
	require.False(t, h.Contains(utc))
	require.True(t, h.Contains(utc.In(tokyo)))
}
