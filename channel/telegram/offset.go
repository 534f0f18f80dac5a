package telegram

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// OffsetStore persists the getUpdates offset (the next update id to fetch)
// per bot. The polling loop saves an offset only after every event of the
// updates below it was accepted by Sink.HandleEvent, so a restart resumes
// without losing an update; a crash between the accept and the save makes
// Telegram deliver that update again, and the pipeline's idempotent enqueue
// drops the repeat.
//
// Implementations must be safe for concurrent use.
type OffsetStore interface {
	// LoadOffset returns the saved offset of bot (its numeric id), or
	// ok=false when none was saved.
	LoadOffset(ctx context.Context, bot string) (offset int64, ok bool, err error)
	// SaveOffset durably records the offset of bot.
	SaveOffset(ctx context.Context, bot string, offset int64) error
}

// FileOffsetStore keeps each bot's offset in a file
// "telegram-<bot>.offset" in a directory, replaced atomically (temporary
// file, fsync, rename, fsync of the directory) on every save.
type FileOffsetStore struct {
	dir string
	mu  sync.Mutex
}

// NewFileOffsetStore returns a store in dir, creating the directory (mode
// 0700) if needed.
func NewFileOffsetStore(dir string) (*FileOffsetStore, error) {
	if dir == "" {
		return nil, errors.New("telegram: offset store directory is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("telegram: offset store: %w", err)
	}
	return &FileOffsetStore{dir: dir}, nil
}

// Path returns the file that holds bot's offset.
func (s *FileOffsetStore) Path(bot string) string {
	return filepath.Join(s.dir, "telegram-"+bot+".offset")
}

func checkBotKey(bot string) error {
	if bot == "" {
		return errors.New("telegram: offset store: empty bot id")
	}
	for _, r := range bot {
		if (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && r != '-' && r != '_' {
			return fmt.Errorf("telegram: offset store: bot id %q is not a plain identifier", bot)
		}
	}
	return nil
}

// LoadOffset reads bot's file. A missing file is ok=false; unparsable
// content is an error.
func (s *FileOffsetStore) LoadOffset(_ context.Context, bot string) (int64, bool, error) {
	if err := checkBotKey(bot); err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := os.ReadFile(s.Path(bot))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("telegram: offset store: %w", err)
	}
	off, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("telegram: offset store: %s is corrupt: %w", s.Path(bot), err)
	}
	return off, true, nil
}

// SaveOffset writes bot's offset atomically and durably.
func (s *FileOffsetStore) SaveOffset(_ context.Context, bot string, offset int64) error {
	if err := checkBotKey(bot); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tmp, err := os.CreateTemp(s.dir, ".telegram-"+bot+"-*.tmp")
	if err != nil {
		return fmt.Errorf("telegram: offset store: %w", err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("telegram: offset store: %w", err)
	}
	if _, err := tmp.WriteString(strconv.FormatInt(offset, 10) + "\n"); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(name, s.Path(bot)); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("telegram: offset store: %w", err)
	}
	// Make the rename durable. Some file systems cannot sync a directory;
	// the rename itself is still atomic there.
	if d, err := os.Open(s.dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// MemoryOffsetStore keeps offsets in memory: for tests, and for processes
// that accept re-reading recent updates after a restart.
type MemoryOffsetStore struct {
	mu   sync.Mutex
	offs map[string]int64
}

// NewMemoryOffsetStore returns an empty store.
func NewMemoryOffsetStore() *MemoryOffsetStore {
	return &MemoryOffsetStore{offs: make(map[string]int64)}
}

// LoadOffset returns the saved offset of bot.
func (s *MemoryOffsetStore) LoadOffset(_ context.Context, bot string) (int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	off, ok := s.offs[bot]
	return off, ok, nil
}

// SaveOffset records the offset of bot.
func (s *MemoryOffsetStore) SaveOffset(_ context.Context, bot string, offset int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offs[bot] = offset
	return nil
}
