package schedule

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Limits of interval specs.
const (
	// MinInterval is the shortest interval an "every" spec may name.
	MinInterval = time.Minute
	// MaxInterval is the longest interval an "every" spec may name (a leap
	// year).
	MaxInterval = 366 * 24 * time.Hour
)

// horizonYears bounds the wall-clock search of Spec.Next: it gives up
// after this many calendar years past t.
const horizonYears = 5

type specKind uint8

const (
	kindNone specKind = iota
	kindEvery
	kindCron
)

// Spec is a parsed schedule spec: a fixed interval ("every 90m") or a
// five-field cron line. The zero Spec has no due times. Specs are
// comparable values; build them with Parse.
type Spec struct {
	kind  specKind
	every time.Duration

	// The cron fields as bit sets: bit i set means value i matches.
	minute uint64 // 0-59
	hour   uint32 // 0-23
	dom    uint32 // 1-31
	month  uint16 // 1-12
	dow    uint8  // 0-6, Sunday is 0

	// domStar and dowStar record that the day-of-month and day-of-week
	// fields were written starting with "*" ("*" or "*/n"): such a field
	// does not restrict the day, so only the other one decides (see
	// dayMatches). domStep and dowStep are their steps, for String.
	domStar, dowStar bool
	domStep, dowStep int
}

// field describes one cron field.
type field struct {
	name   string
	lo, hi int
	names  []string // names[i] stands for the value lo+i
	// starHi is the top of the range "*" covers (dow: 6, while 7 is
	// accepted as a value meaning Sunday).
	starHi int
}

var (
	monthNames = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
	dayNames   = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

	fMinute = field{name: "minute", lo: 0, hi: 59, starHi: 59}
	fHour   = field{name: "hour", lo: 0, hi: 23, starHi: 23}
	fDom    = field{name: "day-of-month", lo: 1, hi: 31, starHi: 31}
	fMonth  = field{name: "month", lo: 1, hi: 12, starHi: 12, names: monthNames}
	fDow    = field{name: "day-of-week", lo: 0, hi: 7, starHi: 6, names: dayNames}
)

// shortcuts are the "@" forms Parse accepts.
var shortcuts = map[string]string{
	"@hourly":  "0 * * * *",
	"@daily":   "0 0 * * *",
	"@weekly":  "0 0 * * 0",
	"@monthly": "0 0 1 * *",
}

// Parse reads a schedule spec. Two forms are accepted:
//
//   - "every D": a fixed interval, D a Go duration ("90m", "1h30m",
//     "24h") of whole minutes between MinInterval and MaxInterval. An
//     interval is elapsed time: it ignores the zone and DST.
//   - a five-field cron line "minute hour day-of-month month day-of-week",
//     each field "*", a number, a range "a-b", a step "*/n" or "a-b/n", or
//     a comma-separated list of numbers, ranges and stepped ranges.
//     Months and weekdays may be named by their first three letters
//     (jan-dec, sun-sat). Day-of-week runs 0-7, both 0 and 7 being
//     Sunday. As in crontab(5), when day-of-month and day-of-week are both
//     restricted (neither starts with "*") a day matches if either
//     matches; otherwise both must. The shortcuts @hourly, @daily,
//     @weekly and @monthly stand for "0 * * * *", "0 0 * * *",
//     "0 0 * * 0" and "0 0 1 * *".
//
// Case and surrounding or repeated white space do not matter. Every
// error wraps ErrSpec and says what is wrong.
func Parse(spec string) (Spec, error) {
	fields := strings.Fields(strings.ToLower(spec))
	if len(fields) == 0 {
		return Spec{}, fmt.Errorf("%w: the spec is empty", ErrSpec)
	}
	fail := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("%w %q: %s", ErrSpec, spec, fmt.Sprintf(format, args...))
	}
	switch {
	case fields[0] == "every":
		if len(fields) != 2 {
			return fail(`want "every" and one duration such as "every 90m"`)
		}
		return parseEvery(spec, fields[1])
	case strings.HasPrefix(fields[0], "@"):
		line, ok := shortcuts[fields[0]]
		if !ok {
			return fail("unknown shortcut %q (known: @hourly, @daily, @weekly, @monthly)", fields[0])
		}
		if len(fields) != 1 {
			return fail("nothing may follow %s", fields[0])
		}
		fields = strings.Fields(line)
	}
	if len(fields) != 5 {
		return fail("a cron spec has 5 fields (minute hour day-of-month month day-of-week), got %d", len(fields))
	}
	s := Spec{kind: kindCron}
	var err error
	var set uint64
	if set, _, _, err = parseField(fields[0], fMinute); err != nil {
		return fail("%v", err)
	}
	s.minute = set
	if set, _, _, err = parseField(fields[1], fHour); err != nil {
		return fail("%v", err)
	}
	s.hour = uint32(set)
	if set, s.domStar, s.domStep, err = parseField(fields[2], fDom); err != nil {
		return fail("%v", err)
	}
	s.dom = uint32(set)
	if set, _, _, err = parseField(fields[3], fMonth); err != nil {
		return fail("%v", err)
	}
	s.month = uint16(set)
	if set, s.dowStar, s.dowStep, err = parseField(fields[4], fDow); err != nil {
		return fail("%v", err)
	}
	if set&(1<<7) != 0 { // 7 is Sunday too
		set = set&^(1<<7) | 1
	}
	s.dow = uint8(set)
	return s, nil
}

// parseEvery reads the duration of an "every" spec.
func parseEvery(spec, text string) (Spec, error) {
	d, err := time.ParseDuration(text)
	if err != nil {
		return Spec{}, fmt.Errorf("%w %q: %q is not a duration such as 90m or 1h30m", ErrSpec, spec, text)
	}
	switch {
	case d < MinInterval:
		return Spec{}, fmt.Errorf("%w %q: interval %s is shorter than the minimum %s", ErrSpec, spec, text, fmtEvery(MinInterval))
	case d > MaxInterval:
		return Spec{}, fmt.Errorf("%w %q: interval %s is longer than the maximum %s", ErrSpec, spec, text, fmtEvery(MaxInterval))
	case d%time.Minute != 0:
		return Spec{}, fmt.Errorf("%w %q: interval %s is not a whole number of minutes", ErrSpec, spec, text)
	}
	return Spec{kind: kindEvery, every: d}, nil
}

// parseField reads one cron field into a bit set. star reports that the
// field is "*" or "*/n"; step is n (1 for "*").
func parseField(text string, f field) (set uint64, star bool, step int, err error) {
	if strings.HasPrefix(text, "*") {
		step = 1
		switch {
		case text == "*":
		case strings.HasPrefix(text, "*/"):
			if step, err = parseStep(text[2:], f, f.starHi-f.lo); err != nil {
				return 0, false, 0, err
			}
		default:
			return 0, false, 0, fmt.Errorf(`%s field %q: "*" may only be followed by "/step", and not combined with a list`, f.name, text)
		}
		for v := f.lo; v <= f.starHi; v += step {
			set |= 1 << v
		}
		return set, true, step, nil
	}
	for part := range strings.SplitSeq(text, ",") {
		if part == "" {
			return 0, false, 0, fmt.Errorf("%s field %q: empty list element", f.name, text)
		}
		if strings.Contains(part, "*") {
			return 0, false, 0, fmt.Errorf(`%s field %q: "*" cannot be part of a list`, f.name, text)
		}
		rng, stepText, stepped := strings.Cut(part, "/")
		loText, hiText, isRange := strings.Cut(rng, "-")
		lo, err := parseValue(loText, f)
		if err != nil {
			return 0, false, 0, fmt.Errorf("%s field %q: %w", f.name, text, err)
		}
		hi := lo
		if isRange {
			if hi, err = parseValue(hiText, f); err != nil {
				return 0, false, 0, fmt.Errorf("%s field %q: %w", f.name, text, err)
			}
			if hi < lo {
				return 0, false, 0, fmt.Errorf("%s field %q: range %s runs backwards", f.name, text, rng)
			}
		}
		st := 1
		if stepped {
			if !isRange {
				return 0, false, 0, fmt.Errorf("%s field %q: a step needs a range or *, as in %d-%d/%s",
					f.name, text, lo, f.hi, stepText)
			}
			if st, err = parseStep(stepText, f, f.hi-f.lo); err != nil {
				return 0, false, 0, err
			}
		}
		for v := lo; v <= hi; v += st {
			set |= 1 << v
		}
	}
	return set, false, 0, nil
}

// parseValue reads a number or a name of field f.
func parseValue(text string, f field) (int, error) {
	if text == "" {
		return 0, fmt.Errorf("missing value (want %d-%d)", f.lo, f.hi)
	}
	for i, n := range f.names {
		if text == n {
			return f.lo + i, nil
		}
	}
	for _, c := range text {
		if c < '0' || c > '9' {
			if f.names != nil {
				return 0, fmt.Errorf("%q is neither a number %d-%d nor a name (%s-%s)",
					text, f.lo, f.hi, f.names[0], f.names[len(f.names)-1])
			}
			return 0, fmt.Errorf("%q is not a number %d-%d", text, f.lo, f.hi)
		}
	}
	v, err := strconv.Atoi(text)
	if err != nil || v < f.lo || v > f.hi {
		return 0, fmt.Errorf("%s is out of range %d-%d", text, f.lo, f.hi)
	}
	return v, nil
}

// parseStep reads the step of a stepped range; max is its largest useful
// value.
func parseStep(text string, f field, maxStep int) (int, error) {
	n, err := strconv.Atoi(text)
	if err != nil || strings.ContainsAny(text, "+-") {
		return 0, fmt.Errorf("%s field: step %q is not a number", f.name, text)
	}
	if n < 1 || n > maxStep {
		return 0, fmt.Errorf("%s field: step %d is out of range 1-%d", f.name, n, maxStep)
	}
	return n, nil
}

// IsZero reports whether s is the zero Spec (not the result of a
// successful Parse).
func (s Spec) IsZero() bool { return s.kind == kindNone }

// Interval returns the interval of an "every" spec, and 0 for a cron spec.
func (s Spec) Interval() time.Duration {
	if s.kind != kindEvery {
		return 0
	}
	return s.every
}

// String returns the canonical form of s: "every 1h30m" for an interval
// (hours and minutes), and for a cron line its five fields rendered from
// the values they match — names become numbers, lists are sorted and
// merged into ranges, a day-of-week 7 becomes 0, and the shortcuts are
// spelled out. Parse(s.String()) equals s. The zero Spec renders as "".
func (s Spec) String() string {
	switch s.kind {
	case kindEvery:
		return "every " + fmtEvery(s.every)
	case kindCron:
		var b strings.Builder
		b.WriteString(fmtSet(s.minute, fMinute))
		b.WriteByte(' ')
		b.WriteString(fmtSet(uint64(s.hour), fHour))
		b.WriteByte(' ')
		b.WriteString(fmtDay(uint64(s.dom), fDom, s.domStar, s.domStep))
		b.WriteByte(' ')
		b.WriteString(fmtSet(uint64(s.month), fMonth))
		b.WriteByte(' ')
		b.WriteString(fmtDay(uint64(s.dow), fDow, s.dowStar, s.dowStep))
		return b.String()
	}
	return ""
}

// fmtEvery renders a whole-minute duration as hours and minutes.
func fmtEvery(d time.Duration) string {
	h, m := int64(d/time.Hour), int64(d%time.Hour/time.Minute)
	switch {
	case h == 0:
		return strconv.FormatInt(m, 10) + "m"
	case m == 0:
		return strconv.FormatInt(h, 10) + "h"
	}
	return strconv.FormatInt(h, 10) + "h" + strconv.FormatInt(m, 10) + "m"
}

// fmtDay renders a day field, whose star-ness matters (see Parse).
func fmtDay(set uint64, f field, star bool, step int) string {
	switch {
	case star && step <= 1:
		return "*"
	case star:
		return "*/" + strconv.Itoa(step)
	}
	return fmtList(set, f)
}

// fmtSet renders a field whose star-ness does not matter: "*" when every
// value matches, "*/n" when the values are the three or more that "*/n"
// gives, else a list.
func fmtSet(set uint64, f field) string {
	if set == starSet(f, 1) {
		return "*"
	}
	for n := 2; n <= (f.starHi-f.lo)/2; n++ {
		if set == starSet(f, n) {
			return "*/" + strconv.Itoa(n)
		}
	}
	return fmtList(set, f)
}

// starSet is the set "*/step" gives in field f.
func starSet(f field, step int) uint64 {
	var set uint64
	for v := f.lo; v <= f.starHi; v += step {
		set |= 1 << v
	}
	return set
}

// fmtList renders set as one stepped range "a-b/n" when its values (three
// or more) are evenly spaced more than one apart, and otherwise as a sorted
// list of values and of ranges of three or more consecutive values.
func fmtList(set uint64, f field) string {
	if n := bits.OnesCount64(set); n >= 3 {
		lo := bits.TrailingZeros64(set)
		rest := set &^ (1 << lo)
		step := bits.TrailingZeros64(rest) - lo
		hi := lo + (n-1)*step
		if step > 1 && hi <= f.hi {
			var prog uint64
			for v := lo; v <= hi; v += step {
				prog |= 1 << v
			}
			if prog == set {
				return strconv.Itoa(lo) + "-" + strconv.Itoa(hi) + "/" + strconv.Itoa(step)
			}
		}
	}
	var parts []string
	for v := f.lo; v <= f.hi; {
		if set&(1<<v) == 0 {
			v++
			continue
		}
		end := v
		for end+1 <= f.hi && set&(1<<(end+1)) != 0 {
			end++
		}
		switch {
		case end-v >= 2:
			parts = append(parts, strconv.Itoa(v)+"-"+strconv.Itoa(end))
		case end > v:
			parts = append(parts, strconv.Itoa(v), strconv.Itoa(end))
		default:
			parts = append(parts, strconv.Itoa(v))
		}
		v = end + 1
	}
	return strings.Join(parts, ",")
}

// Next returns the first due time of s strictly after t, reading wall
// clock time in loc (nil means UTC). The result is in loc.
//
// For an interval spec the due times are anchor + k·interval for every
// integer k, so the result is the first of them after t; the interval is
// elapsed time and loc only sets the result's location.
//
// A cron spec falls due at the start of each matching wall-clock minute.
// A wall time that does not exist on a day (skipped by a DST change) is
// skipped; one that occurs twice (repeated by a DST change) falls due
// once, at its first occurrence. Next returns the zero time when no due
// time falls within five years after t (e.g. "0 0 30 2 *"), and for the zero
// Spec.
func (s Spec) Next(anchor, t time.Time, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	switch s.kind {
	case kindEvery:
		return nextEvery(s.every, anchor, t).In(loc)
	case kindCron:
		return s.nextCron(t, loc)
	}
	return time.Time{}
}

// nextEvery returns the first anchor + k·every strictly after t. It works
// in whole seconds (every is whole minutes) so that it cannot overflow for
// an anchor centuries away.
func nextEvery(every time.Duration, anchor, t time.Time) time.Time {
	iv := int64(every / time.Second)
	as, an := anchor.Unix(), anchor.Nanosecond()
	// anchor + x seconds > t  ⟺  x > e, for integer x.
	e := t.Unix() - as
	if t.Nanosecond() < an {
		e--
	}
	k := floorDiv(e, iv) + 1
	return time.Unix(as+k*iv, int64(an))
}

// floorDiv divides rounding towards minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// nextCron searches the wall-clock minutes after t's for the first that
// matches s and exists in loc.
func (s Spec) nextCron(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	y, m, d := lt.Date()
	mo := int(m)
	h, mi := lt.Hour(), lt.Minute()+1
	limit := civilKey(y+horizonYears, mo, d)
	for {
		if mi > 59 {
			mi = 0
			h++
		}
		if h > 23 {
			h = 0
			d++
		}
		if d > daysIn(y, mo) {
			d = 1
			mo++
		}
		if mo > 12 {
			mo = 1
			y++
		}
		if civilKey(y, mo, d) > limit {
			return time.Time{}
		}
		if s.month&(1<<mo) == 0 {
			mo++
			d, h, mi = 1, 0, 0
			continue
		}
		if !s.dayMatches(y, mo, d) {
			d++
			h, mi = 0, 0
			continue
		}
		if s.hour&(1<<h) == 0 {
			rest := s.hour >> h << h
			if rest == 0 {
				d++
				h, mi = 0, 0
				continue
			}
			h, mi = bits.TrailingZeros32(rest), 0
		}
		if s.minute&(1<<mi) == 0 {
			rest := s.minute >> mi << mi
			if rest == 0 {
				h++
				mi = 0
				continue
			}
			mi = bits.TrailingZeros64(rest)
		}
		if u, ok := wallInstant(civilDays(y, mo, d)*86400+int64(h*3600+mi*60), loc); ok && u.After(t) {
			return u
		}
		mi++
	}
}

// dayMatches applies the day-of-month / day-of-week rule of Parse.
func (s Spec) dayMatches(y, mo, d int) bool {
	domOK := s.dom&(1<<d) != 0
	dowOK := s.dow&(1<<weekday(y, mo, d)) != 0
	if s.domStar || s.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// wallInstant returns the earliest instant whose wall clock in loc reads
// civil (seconds since 1970-01-01 00:00 as a wall-clock reading), and false
// when that reading does not exist in loc (a DST gap).
func wallInstant(civil int64, loc *time.Location) (time.Time, bool) {
	if loc == time.UTC {
		return time.Unix(civil, 0).UTC(), true
	}
	// UTC offsets lie within -12h..+14h (with margin), so the instant lies
	// within [civil-15h, civil+13h]; walk the zone's periods over that
	// window in order and take the first that maps the reading into itself.
	lo, hi := civil-15*3600, civil+13*3600
	at := time.Unix(lo, 0).In(loc)
	for {
		_, off := at.Zone()
		start, end := at.ZoneBounds()
		u := civil - int64(off)
		if (start.IsZero() || u >= start.Unix()) && (end.IsZero() || u < end.Unix()) {
			return time.Unix(u, 0).In(loc), true
		}
		if end.IsZero() || end.Unix() > hi {
			return time.Time{}, false
		}
		at = end.In(loc)
	}
}

// civilKey orders calendar dates.
func civilKey(y, mo, d int) int { return y*10000 + mo*100 + d }

// daysIn returns the number of days of month mo (1-12) of year y.
func daysIn(y, mo int) int {
	switch mo {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// civilDays returns the number of days from 1970-01-01 to the proleptic
// Gregorian date y-mo-d.
func civilDays(y, mo, d int) int64 {
	// Count from 1 March so that the leap day ends the year.
	if mo <= 2 {
		y--
	}
	era := floorDiv(int64(y), 400)
	yoe := int64(y) - era*400
	mp := int64((mo + 9) % 12)
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// weekday returns the day of the week of y-mo-d, Sunday being 0.
func weekday(y, mo, d int) int {
	// 1970-01-01 was a Thursday.
	w := (civilDays(y, mo, d) + 4) % 7
	if w < 0 {
		w += 7
	}
	return int(w)
}
