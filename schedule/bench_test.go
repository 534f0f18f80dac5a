package schedule_test

import (
	"testing"
	"time"

	"github.com/personakit/persona/schedule"
)

func benchNext(b *testing.B, spec, zone string) {
	s, err := schedule.Parse(spec)
	if err != nil {
		b.Fatal(err)
	}
	loc, err := schedule.LoadZone(zone)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	end := start.AddDate(4, 0, 0)
	at := start
	b.ReportAllocs()
	for b.Loop() {
		at = s.Next(start, at, loc)
		if at.IsZero() {
			b.Fatal("no next")
		}
		if at.After(end) {
			at = start
		}
	}
}

// BenchmarkNext measures one Next call, following the due times over four
// years and starting again.
func BenchmarkNext(b *testing.B) {
	b.Run("cron-weekdays-berlin", func(b *testing.B) { benchNext(b, "30 9 * * mon-fri", "Europe/Berlin") })
	b.Run("cron-every-15m-utc", func(b *testing.B) { benchNext(b, "*/15 * * * *", "") })
	b.Run("cron-dom-or-dow-newyork", func(b *testing.B) { benchNext(b, "0 12 13 * 5", "America/New_York") })
	b.Run("cron-leap-day", func(b *testing.B) { benchNext(b, "0 0 29 2 *", "") })
	b.Run("interval", func(b *testing.B) { benchNext(b, "every 1h30m", "Asia/Shanghai") })
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := schedule.Parse("0,30 9-17/2 * jan-jun mon-fri"); err != nil {
			b.Fatal(err)
		}
	}
}
