package gate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidHours is wrapped by every error ParseHours returns.
var ErrInvalidHours = errors.New("gate: invalid active hours")

// Hours is a daily window of active hours, "HH:MM-HH:MM" in some zone. A
// window whose end is before its start runs overnight ("22:00-06:00").
// "00:00-24:00" is the whole day. The zero Hours is the whole day too.
type Hours struct {
	// start and end are minutes after midnight; end may be 1440.
	start, end int
	set        bool
}

// ParseHours parses "HH:MM-HH:MM" (also with "–", "—" or "~" between the
// times, spaces allowed around it; hours may have one digit). 24:00 is
// allowed as the end only, and start and end must differ.
func ParseHours(s string) (Hours, error) {
	bad := func(format string, a ...any) (Hours, error) {
		return Hours{}, fmt.Errorf("%w %q: %s", ErrInvalidHours, s, fmt.Sprintf(format, a...))
	}
	var from, to string
	for _, sep := range []string{"-", "–", "—", "~"} {
		if a, b, ok := strings.Cut(s, sep); ok {
			from, to = strings.TrimSpace(a), strings.TrimSpace(b)
			break
		}
	}
	if from == "" || to == "" {
		return bad("want HH:MM-HH:MM")
	}
	start, err := parseClock(from, false)
	if err != nil {
		return bad("start: %v", err)
	}
	end, err := parseClock(to, true)
	if err != nil {
		return bad("end: %v", err)
	}
	if start == end {
		return bad("start and end are equal; use 00:00-24:00 for the whole day")
	}
	return Hours{start: start, end: end, set: true}, nil
}

// parseClock parses H:MM or HH:MM into minutes after midnight.
func parseClock(s string, end bool) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) < 1 || len(h) > 2 || len(m) != 2 {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || mm < 0 || h[0] == '+' || m[0] == '+' {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	switch {
	case mm > 59:
		return 0, fmt.Errorf("minute %d out of range", mm)
	case hh == 24 && mm == 0 && end:
		return 24 * 60, nil
	case hh > 23:
		return 0, fmt.Errorf("hour %d out of range", hh)
	}
	return hh*60 + mm, nil
}

// Contains reports whether the wall-clock time of t (in t's own location)
// falls inside the window. The start minute is inside, the end minute is
// not.
func (h Hours) Contains(t time.Time) bool {
	if !h.set {
		return true
	}
	m := t.Hour()*60 + t.Minute()
	if h.start < h.end {
		return m >= h.start && m < h.end
	}
	return m >= h.start || m < h.end
}

// IsZero reports whether h is the zero (whole-day) window.
func (h Hours) IsZero() bool { return !h.set }

// String renders the window as "HH:MM-HH:MM" ("" for the zero Hours).
func (h Hours) String() string {
	if !h.set {
		return ""
	}
	return fmt.Sprintf("%02d:%02d-%02d:%02d", h.start/60, h.start%60, h.end/60, h.end%60)
}
