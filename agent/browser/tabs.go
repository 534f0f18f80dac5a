package browser

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/clock"
)

// tab is one conversation's interactive page. Its surface is guarded by
// mu, which also serialises the conversation's actions; busy, last and
// gone are guarded by Browser.tabMu.
type tab struct {
	b    *Browser
	key  string // the session key (never logged or written anywhere)
	hash string // hash of the session key: folder name and log field

	mu   sync.Mutex
	surf *surface
	url  string // the page's URL after the last action

	busy int       // actions entered and not yet left
	last time.Time // end of the last action (the Browser's clock)
	gone bool      // removed from the table
}

// sessionHash names a session without revealing its key.
func sessionHash(key string) string {
	sum := sha256.Sum256([]byte("persona-browser\x00" + key))
	return hex.EncodeToString(sum[:16])
}

// enterTab returns the session's tab, counting the caller as busy on it
// (pair with leaveTab). create opens a tab when there is none, closing
// the longest idle tab when MaxTabs are open. An idle tab past its hold
// counts as closed.
func (b *Browser) enterTab(key string, create bool) (*tab, error) {
	now := b.cfg.Clock.Now()
	var evict []*tab
	defer func() {
		for _, t := range evict {
			t.shut()
		}
	}()
	b.tabMu.Lock()
	defer b.tabMu.Unlock()
	if b.tabs == nil {
		return nil, ErrClosed
	}
	t := b.tabs[key]
	if t != nil && t.busy == 0 && now.Sub(t.last) >= b.cfg.Hold {
		b.dropLocked(key, t)
		evict = append(evict, t)
		b.log.Info("browser: tab closed after its hold", "session", t.hash[:12])
		t = nil
	}
	if t == nil {
		if !create {
			return nil, ErrNoTab
		}
		if len(b.tabs) >= b.cfg.MaxTabs {
			var oldKey string
			var oldest *tab
			for k, o := range b.tabs {
				if o.busy == 0 && (oldest == nil || o.last.Before(oldest.last)) {
					oldKey, oldest = k, o
				}
			}
			if oldest == nil {
				return nil, fmt.Errorf("%w (%d open)", ErrTooManyTabs, len(b.tabs))
			}
			b.dropLocked(oldKey, oldest)
			evict = append(evict, oldest)
			b.log.Info("browser: oldest idle tab closed to make room", "session", oldest.hash[:12])
		}
		t = &tab{b: b, key: key, hash: sessionHash(key), last: now}
		b.tabs[key] = t
	}
	t.busy++
	return t, nil
}

// leaveTab ends one action on t and starts its hold anew. empty says the
// tab has no page (opening it failed): it is dropped once nobody uses it.
func (b *Browser) leaveTab(t *tab, empty bool) {
	b.tabMu.Lock()
	defer b.tabMu.Unlock()
	t.busy--
	t.last = b.cfg.Clock.Now()
	if empty && t.busy == 0 && !t.gone {
		b.dropLocked(t.key, t)
	}
}

func (b *Browser) dropLocked(key string, t *tab) {
	if b.tabs[key] == t {
		delete(b.tabs, key)
	}
	t.gone = true
}

// closeTab closes the session's tab; it reports whether one was open.
func (b *Browser) closeTab(key string) bool {
	b.tabMu.Lock()
	t := b.tabs[key]
	if t != nil {
		b.dropLocked(key, t)
	}
	b.tabMu.Unlock()
	if t == nil {
		return false
	}
	t.shut()
	return true
}

// shut closes the tab's page and context. An action in progress finishes
// first.
func (t *tab) shut() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropSurface()
}

// dropSurface closes the surface; t.mu is held.
func (t *tab) dropSurface() {
	if t.surf == nil {
		return
	}
	s := t.surf
	t.surf = nil
	t.url = ""
	s.close()
	t.b.release(s.inst)
}

// sweep closes the tabs idle for at least Hold at now.
func (b *Browser) sweep(now time.Time) int {
	var idle []*tab
	b.tabMu.Lock()
	for k, t := range b.tabs {
		if t.busy == 0 && now.Sub(t.last) >= b.cfg.Hold {
			b.dropLocked(k, t)
			idle = append(idle, t)
		}
	}
	b.tabMu.Unlock()
	for _, t := range idle {
		t.shut()
		b.log.Info("browser: tab closed after its hold", "session", t.hash[:12])
	}
	return len(idle)
}

// sweepLoop runs sweep every sweepEvery on the clock until Close.
func (b *Browser) sweepLoop(t clock.Timer) {
	defer b.wg.Done()
	for {
		select {
		case <-b.done:
			t.Stop()
			return
		case <-t.C():
		}
		b.sweep(b.cfg.Clock.Now())
		t = b.cfg.Clock.NewTimer(b.sweepEvery)
	}
}

// tabCount reports the open tabs.
func (b *Browser) tabCount() int {
	b.tabMu.Lock()
	defer b.tabMu.Unlock()
	return len(b.tabs)
}

// Screenshot files and folders this package writes, and nothing else, are
// what Cleanup may delete.
const shotPrefix = "shot-"

func isShotFolder(name string) bool {
	if len(name) != 32 {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}

func isShotFile(name string) bool {
	return strings.HasPrefix(name, shotPrefix) &&
		(strings.HasSuffix(name, ".png") || strings.HasSuffix(name, ".jpg"))
}

// saveShot writes an interactive screenshot into the session's folder and
// stamps it with the Browser's clock.
func (b *Browser) saveShot(hash string, img []byte, typ string) (string, error) {
	dir := filepath.Join(b.cfg.Dir, hash)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("browser: screenshot folder: %w", err)
	}
	now := b.cfg.Clock.Now()
	ext := ".png"
	if typ == "image/jpeg" {
		ext = ".jpg"
	}
	f, err := os.CreateTemp(dir, shotPrefix+now.UTC().Format("20060102-150405.000")+"-*"+ext)
	if err != nil {
		return "", fmt.Errorf("browser: screenshot file: %w", err)
	}
	name := f.Name()
	_, werr := f.Write(img)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(name)
		return "", fmt.Errorf("browser: writing screenshot: %w", err)
	}
	if err := os.Chtimes(name, now, now); err != nil {
		return "", fmt.Errorf("browser: screenshot time: %w", err)
	}
	return name, nil
}

// Cleanup deletes interactive screenshots older than Retention at now,
// and conversation folders left empty. It touches only the files and
// folders this package writes under Dir.
func (b *Browser) Cleanup(now time.Time) error {
	entries, err := os.ReadDir(b.cfg.Dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("browser: cleanup: %w", err)
	}
	cutoff := now.Add(-b.cfg.Retention)
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !isShotFolder(e.Name()) {
			continue
		}
		dir := filepath.Join(b.cfg.Dir, e.Name())
		files, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		left := len(files)
		for _, f := range files {
			if !f.Type().IsRegular() || !isShotFile(f.Name()) {
				continue
			}
			info, err := f.Info()
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
				continue
			}
			if info.ModTime().Before(cutoff) {
				if err := os.Remove(filepath.Join(dir, f.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
					continue
				}
				left--
			}
		}
		if left == 0 {
			// Fails harmlessly when a screenshot arrived meanwhile.
			_ = os.Remove(dir)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("browser: cleanup: %w", err)
	}
	return nil
}

// Run calls Cleanup at once and then every hour on the clock until ctx
// ends; it returns nil then. Cleanup errors are logged. Idle tabs are
// closed by the Browser itself, with or without Run.
func (b *Browser) Run(ctx context.Context) error {
	for {
		if err := b.Cleanup(b.cfg.Clock.Now()); err != nil {
			b.log.Warn("browser: screenshot cleanup failed", "err", err)
		}
		if !clock.Sleep(b.cfg.Clock, ctx.Done(), cleanupEvery) {
			return nil
		}
	}
}
