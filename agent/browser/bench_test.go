package browser_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/personakit/persona/agent/browser"
)

// BenchmarkRenderWarm measures one render (fresh incognito context, load,
// settle, visible text) on the warm Chromium, and the memory one more
// concurrently open render slot costs.
//
// Memory method: the memory of the Chromium process and all its
// descendants (renderers, GPU and utility processes) is read once with no
// page open and once with Slots renders held open on a page whose image
// never finishes; the difference divided by Slots is reported twice:
// MiB-RSS/slot sums VmRSS from /proc/<pid>/status (pages shared between
// processes count once per process: an upper bound), MiB-PSS/slot sums Pss
// from /proc/<pid>/smaps_rollup (shared pages split between their
// sharers: what the slot really adds).
func BenchmarkRenderWarm(b *testing.B) {
	ctx := context.Background()
	if _, err := shared.Render(ctx, site.url("/"), browser.RenderOptions{}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		p, err := shared.Render(ctx, site.url("/"), browser.RenderOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if p.Title != "Test page" {
			b.Fatalf("title %q", p.Title)
		}
	}
	rss, pss := slotMemory(b)
	b.ReportMetric(rss/(1<<20), "MiB-RSS/slot")
	b.ReportMetric(pss/(1<<20), "MiB-PSS/slot")
}

// slotMemory returns the RSS and PSS growth per open render slot, in
// bytes.
func slotMemory(b *testing.B) (rss, pss float64) {
	pid := shared.PID()
	baseRSS, basePSS := treeMemory(pid)
	n := shared.Slots()
	ctx, cancel := context.WithCancel(context.Background())
	before := site.holding.Load()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, _ = shared.Render(ctx, site.url("/hold"), browser.RenderOptions{Settle: 50 * time.Second})
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for site.holding.Load() < before+int64(n) {
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			b.Fatal("the held renders did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // let the pages paint
	loadedRSS, loadedPSS := treeMemory(pid)
	cancel()
	wg.Wait()
	return float64(loadedRSS-baseRSS) / float64(n), float64(loadedPSS-basePSS) / float64(n)
}

// treeMemory sums VmRSS (from status) and Pss (from smaps_rollup) over pid
// and its descendants, in bytes.
func treeMemory(pid int) (rss, pss int64) {
	parent := map[int]int{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		_, rest, ok := strings.Cut(string(stat), ") ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[p] = pp
	}
	inTree := func(p int) bool {
		for i := 0; i < 64 && p > 1; i++ {
			if p == pid {
				return true
			}
			p = parent[p]
		}
		return false
	}
	for p := range parent {
		if !inTree(p) {
			continue
		}
		rss += procField(p, "status", "VmRSS:")
		pss += procField(p, "smaps_rollup", "Pss:")
	}
	return rss, pss
}

// procField reads a "Name:   123 kB" line of /proc/<pid>/<file>, in bytes.
func procField(pid int, file, name string) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
