package inbound

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/personakit/persona/channel"
)

// Bounds of the in-memory sequence tracking and gap verification.
const (
	// seqMemory is how many seqs per group chat the coordinator remembers.
	seqMemory = 2048
	// maxGapJobs caps the outstanding gap verifications; more are dropped
	// with a warning (the next backfill covers them).
	maxGapJobs = 256
	// gapScanPages bounds how many history pages one gap check reads.
	gapScanPages = 10
)

// seqSet remembers the recently seen seqs of one group chat, sorted
// ascending and capped at seqMemory (the smallest are forgotten first).
type seqSet struct {
	seqs []int64
}

// add records seq and reports whether it was new.
func (s *seqSet) add(seq int64) bool {
	i, found := slices.BinarySearch(s.seqs, seq)
	if found {
		return false
	}
	if len(s.seqs) >= seqMemory {
		if i == 0 {
			return false // older than everything remembered
		}
		s.seqs = slices.Delete(s.seqs, 0, 1)
		i--
	}
	s.seqs = slices.Insert(s.seqs, i, seq)
	return true
}

// has reports whether seq was seen.
func (s *seqSet) has(seq int64) bool {
	_, found := slices.BinarySearch(s.seqs, seq)
	return found
}

// below returns the largest seen seq smaller than seq, or 0.
func (s *seqSet) below(seq int64) int64 {
	i, _ := slices.BinarySearch(s.seqs, seq)
	if i == 0 {
		return 0
	}
	return s.seqs[i-1]
}

// missing returns the seqs in [lo, hi] not seen, ascending.
func (s *seqSet) missing(lo, hi int64) []int64 {
	var out []int64
	for q := lo; q <= hi; q++ {
		if !s.has(q) {
			out = append(out, q)
		}
	}
	return out
}

// gapJob is one verifyGroupSeqGap: a range of seqs of a group chat that
// live delivery skipped.
type gapJob struct {
	chat channel.Chat
	// from and to are the detected range (inclusive). from == 0 means the
	// lower end is unknown until the running backfill finished (the first
	// live message of a chat the process has never seen).
	from, to int64
	// lo is the lowest seq checked: from, or to − SessionCap + 1 for a
	// very wide range (the reconnect backfill covers the rest).
	lo int64
	// due is when the next check runs; checks counts the checks done.
	due    time.Time
	checks int
	// first is the time of the first check; the rechecks are relative to it.
	first time.Time
}

// noteSeqLocked remembers the seq of a group event. c.mu must be held. It
// returns the largest seq seen before below ev.Seq, whether the chat had no
// seq at all before, and whether this seq is new.
func (c *Coordinator) noteSeqLocked(ev *channel.Event) (prev int64, empty, added bool) {
	if ev.Chat.Kind != channel.Group || ev.Seq <= 0 {
		return 0, false, false
	}
	s := c.seqs[ev.Chat]
	if s == nil {
		s = &seqSet{}
		c.seqs[ev.Chat] = s
	}
	empty = len(s.seqs) == 0
	prev = s.below(ev.Seq)
	added = s.add(ev.Seq)
	return prev, empty, added
}

// noteSeq is noteSeqLocked taking the lock.
func (c *Coordinator) noteSeq(ev *channel.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noteSeqLocked(ev)
}

// ObserveLive feeds one live event to sequence-gap detection.
// The pipeline calls it for every live group event it accepted, the bot's
// own echoes included (they keep the seq run contiguous). Events without a
// Seq, private chats and notices are ignored; events from backfill, gap
// refetch or the journal only update the seen seqs.
//
// The first live message of a group after a (re)connect, and any live
// message whose Seq jumps by more than 1 over the last seen Seq of that
// chat, schedule a targeted refetch of the missing range. It runs once the
// running backfill finished (and after the first backfill of a reconnect)
// and is rechecked at 15 s, 1 min and 3 min. ObserveLive never blocks on
// I/O.
func (c *Coordinator) ObserveLive(ctx context.Context, ev channel.Event) {
	if ev.Chat.Kind != channel.Group || ev.Seq <= 0 || ev.Kind == channel.KindNotice {
		return
	}
	live := ev.Source == "" || ev.Source == channel.SourceLive
	c.mu.Lock()
	now := c.clk.Now()
	if c.online && live {
		c.lastSeen = now
	}
	prev, empty, added := c.noteSeqLocked(&ev)
	if !live || !added || c.hist == nil {
		c.mu.Unlock()
		return
	}
	var from, to int64
	switch {
	case prev > 0 && ev.Seq-prev > 1:
		from, to = prev+1, ev.Seq-1
	case empty && ev.Seq > 1:
		// Nothing known about this chat yet: the range is settled once
		// the backfill told us what came before.
		from, to = 0, ev.Seq-1
	default:
		c.mu.Unlock()
		return
	}
	if len(c.gaps) >= maxGapJobs {
		c.mu.Unlock()
		c.log.WarnContext(ctx, "backfill_gap_dropped", slog.String("chat", ev.Chat.String()),
			slog.Int64("from", from), slog.Int64("to", to), slog.String("reason", "too many open gap checks"))
		return
	}
	j := &gapJob{chat: ev.Chat, from: from, to: to, lo: from, due: now}
	c.clampGap(j)
	c.gaps = append(c.gaps, j)
	c.changedLocked()
	c.mu.Unlock()
	if from > 0 {
		c.logGapDetected(ctx, j)
	}
}

// clampGap limits the checked range to the newest SessionCap seqs.
func (c *Coordinator) clampGap(j *gapJob) {
	j.lo = j.from
	if limit := int64(c.cfg.SessionCap); j.to-j.lo+1 > limit {
		j.lo = j.to - limit + 1
	}
}

func (c *Coordinator) logGapDetected(ctx context.Context, j *gapJob) {
	c.log.InfoContext(ctx, "backfill_gap_detected", slog.String("chat", j.chat.String()),
		slog.Int64("from", j.from), slog.Int64("to", j.to), slog.Int64("checked_from", j.lo))
}

// runDueGap runs the earliest due gap check, if any may run now, and
// reports whether it ran one. Gap checks wait while offline and until the
// first backfill after a reconnect finished; they never overlap a backfill
// because both run on the Run goroutine.
func (c *Coordinator) runDueGap(ctx context.Context, now time.Time) bool {
	c.mu.Lock()
	if !c.online || c.firstPending || c.hist == nil {
		c.mu.Unlock()
		return false
	}
	best := -1
	for i, j := range c.gaps {
		if !j.due.After(now) && (best < 0 || j.due.Before(c.gaps[best].due)) {
			best = i
		}
	}
	if best < 0 {
		c.mu.Unlock()
		return false
	}
	j := c.gaps[best]
	c.gaps = slices.Delete(c.gaps, best, best+1)
	jctx, cancel := context.WithCancel(ctx)
	c.cancelJob = cancel
	cutoff := c.cutoffLocked(now)
	c.mu.Unlock()

	again := c.checkGap(jctx, j, cutoff)
	interrupted := jctx.Err() != nil
	cancel()

	c.mu.Lock()
	c.cancelJob = nil
	if interrupted && ctx.Err() == nil {
		// Cut short by a disconnect: check again once back online.
		j.due = c.clk.Now()
		c.gaps = append(c.gaps, j)
	} else if again {
		c.gaps = append(c.gaps, j)
	}
	c.changedLocked()
	c.mu.Unlock()
	return true
}

// checkGap runs one check of j and reports whether another is scheduled
// (j.due updated).
func (c *Coordinator) checkGap(ctx context.Context, j *gapJob, cutoff time.Time) (again bool) {
	chat := j.chat.String()
	if j.from == 0 {
		c.mu.Lock()
		prev := int64(0)
		if s := c.seqs[j.chat]; s != nil {
			prev = s.below(j.to + 1)
		}
		c.mu.Unlock()
		if prev == 0 || prev >= j.to {
			return false // nothing known before it, or nothing missing
		}
		j.from = prev + 1
		c.clampGap(j)
		if len(c.missing(j)) == 0 {
			return false
		}
		c.logGapDetected(ctx, j)
	}
	if len(c.missing(j)) > 0 {
		if err := c.refetchGap(ctx, j, cutoff); err != nil {
			if ctx.Err() != nil {
				return false
			}
			c.log.WarnContext(ctx, "backfill_gap_fetch_failed", slog.String("chat", chat),
				slog.Int64("from", j.from), slog.Int64("to", j.to), slog.Any("error", err))
		}
	}
	now := c.clk.Now()
	j.checks++
	if j.checks == 1 {
		j.first = now
	}
	missing := c.missing(j)
	if len(missing) == 0 {
		c.log.InfoContext(ctx, "backfill_gap_resolved", slog.String("chat", chat),
			slog.Int64("from", j.from), slog.Int64("to", j.to), slog.Int("checks", j.checks))
		return false
	}
	if j.checks > len(c.cfg.GapRechecks) {
		c.log.WarnContext(ctx, "backfill_gap_unresolved", slog.String("chat", chat),
			slog.Int64("from", j.from), slog.Int64("to", j.to), slog.Int("checks", j.checks),
			slog.Any("missing", missing))
		return false
	}
	j.due = j.first.Add(c.cfg.GapRechecks[j.checks-1])
	// Written once the recheck time is fixed, so a test that saw it can
	// advance a fake clock to it.
	c.log.DebugContext(ctx, "backfill_gap_recheck_scheduled", slog.String("chat", chat),
		slog.Int64("from", j.from), slog.Int64("to", j.to), slog.Int("checks", j.checks),
		slog.Any("missing", missing), slog.Time("due", j.due))
	return true
}

// missing returns the seqs of j's checked range not seen yet.
func (c *Coordinator) missing(j *gapJob) []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seqs[j.chat]
	if s == nil {
		s = &seqSet{}
	}
	return s.missing(j.lo, j.to)
}

// refetchGap reads the chat's history newest→older until it passes j.lo
// and enqueues the new messages of the range under the backfill rules with
// Source gap.
func (c *Coordinator) refetchGap(ctx context.Context, j *gapJob, cutoff time.Time) error {
	want := map[int64]bool{}
	for _, q := range c.missing(j) {
		want[q] = true
	}
	var (
		cursor  string
		cursors = map[string]bool{"": true}
		seen    = map[string]bool{}
		cands   []channel.Event
	)
	for range gapScanPages {
		page, err := c.hist.FetchHistory(ctx, channel.HistoryQuery{Chat: j.chat, Cursor: cursor, Limit: c.cfg.PageSize})
		if err != nil {
			return fmt.Errorf("fetch history: %w", err)
		}
		passed := false
		for _, raw := range page.Events {
			ev := c.fill(raw, j.chat, channel.SourceGap)
			if ev.Seq > 0 && ev.Seq < j.lo {
				passed = true
			}
			if !want[ev.Seq] {
				continue
			}
			c.noteSeq(&ev)
			if c.skip(&ev) {
				continue
			}
			key := ev.Key()
			if seen[key] {
				continue
			}
			seen[key] = true
			known, err := c.cfg.Known(ctx, key)
			if err != nil {
				return fmt.Errorf("known %s: %w", key, err)
			}
			if !known {
				cands = append(cands, ev)
			}
		}
		if passed || len(page.Events) < c.cfg.PageSize || page.Next == "" || cursors[page.Next] {
			break
		}
		cursors[page.Next] = true
		cursor = page.Next
	}
	var n counts
	if err := c.admit(ctx, cands, cutoff, &n); err != nil {
		return err
	}
	if n.enqueued > 0 {
		c.log.DebugContext(ctx, "backfill_gap_enqueued", slog.String("chat", j.chat.String()),
			slog.Int("enqueued", n.enqueued), slog.Int("triggered", n.triggered),
			slog.Int("history_only", n.historyOnly), slog.Int("stale", n.stale))
	}
	return nil
}
