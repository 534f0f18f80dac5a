package browser

import "time"

// Test hooks.

// PID returns the pid of the current Chromium process (0 if none).
func (b *Browser) PID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inst == nil {
		return 0
	}
	return b.inst.pid
}

// MaxRenderPages returns the most render pages ever open at once.
func (b *Browser) MaxRenderPages() int64 { return b.maxRenderPages.Load() }

// TabCount returns the open interactive tabs.
func (b *Browser) TabCount() int { return b.tabCount() }

// SweepEvery returns the idle sweeper's period.
func (b *Browser) SweepEvery() time.Duration { return b.sweepEvery }

// ProxyRefused returns how many connections the proxy's guard refused.
func (b *Browser) ProxyRefused() int64 { return b.proxy.refused.Load() }

// SlotsInUse returns the render slots taken.
func (b *Browser) SlotsInUse() int { return b.slots.inUse() }

// NewPoolForTest exposes the slot pool.
var NewPoolForTest = newPool

// Acquire exposes pool.acquire.
var Acquire = (*pool).acquire

// SessionHash exposes the folder name of a session.
var SessionHash = sessionHash

// CutText exposes cutText.
var CutText = cutText

// NewIdleForTest returns a Browser without Chromium, for the parts that
// need none (Cleanup, Run).
func NewIdleForTest(cfg Config) *Browser {
	cfg = cfg.withDefaults()
	return &Browser{cfg: cfg, log: cfg.Logger, tabs: map[string]*tab{}, all: map[*instance]struct{}{}}
}

// SetRecycleAfter changes how many pages one Chromium serves.
func (b *Browser) SetRecycleAfter(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recycleAfter = n
}

// RecycleAfter is the default.
const RecycleAfter = recycleAfter
