package openai

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{name: "absent", want: 0},
		{name: "seconds", header: map[string]string{"Retry-After": "20"}, want: 20 * time.Second},
		{name: "fractional seconds", header: map[string]string{"Retry-After": "0.5"}, want: 500 * time.Millisecond},
		{name: "http date", header: map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, want: 90 * time.Second},
		{name: "http date in the past", header: map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, want: 0},
		{name: "milliseconds win", header: map[string]string{"Retry-After": "3", "Retry-After-Ms": "250"}, want: 250 * time.Millisecond},
		{name: "bad milliseconds fall back", header: map[string]string{"Retry-After": "3", "Retry-After-Ms": "soon"}, want: 3 * time.Second},
		{name: "garbage", header: map[string]string{"Retry-After": "later"}, want: 0},
		{name: "negative", header: map[string]string{"Retry-After": "-5"}, want: 0},
		{name: "NaN", header: map[string]string{"Retry-After": "NaN"}, want: 0},
		{name: "huge is capped", header: map[string]string{"Retry-After": "1e30"}, want: maxRetryAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			require.Equal(t, tt.want, retryAfter(h, now))
		})
	}
}
