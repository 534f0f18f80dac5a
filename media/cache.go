package media

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/clock"
)

const (
	defaultMaxFileBytes  = 20 << 20
	defaultMaxTotalBytes = 1 << 30
	defaultTTL           = 30 * 24 * time.Hour
	// touchEvery throttles writing a blob's last use to its mtime.
	touchEvery = time.Minute
	// cleanupEvery is how often Run cleans up.
	cleanupEvery = time.Hour
)

// Blob is content held in the cache, named by the SHA-256 of its bytes.
type Blob struct {
	// SHA256 is the lowercase hex SHA-256 of the content.
	SHA256 string
	// MIME is the type sniffed from the bytes (the declared type only when
	// the bytes did not tell).
	MIME string
	// Size is the length in bytes.
	Size int64
}

// CacheConfig configures a Cache. Dir is required.
type CacheConfig struct {
	// Dir holds the cache; it is created (mode 0o700) when missing. One
	// Cache at a time may use it.
	Dir string
	// MaxFileBytes caps one blob (0 = 20 MiB).
	MaxFileBytes int64
	// MaxTotalBytes caps all blobs together (0 = 1 GiB); Cleanup evicts
	// the least recently used blobs beyond it.
	MaxTotalBytes int64
	// TTL: Cleanup removes blobs not used for this long (0 = 30 days),
	// together with their refs and notes.
	TTL time.Duration
	// Clock is the time source for last use and Run (nil = the wall clock).
	Clock clock.Clock
	// Logger receives cleanup and repair logs (nil = slog.Default()).
	Logger *slog.Logger
}

// Cache is a content-addressed store of media on disk with two small
// indexes: refs (a platform reference → its blob) and notes (texts derived
// from a blob, such as its description). Layout under Dir:
//
//	blobs/ab/abcd…          the content
//	blobs/ab/abcd….meta     JSON: MIME, size and the notes
//	refs/12/1234…           the blob SHA-256 of a reference (file name:
//	                        the SHA-256 of the reference key)
//	tmp/                    files being written
//
// Every file is written to tmp/ and renamed into place, so a crash leaves
// either the old or the new version; OpenCache drops what is half done. A
// blob's modification time is its last use. A Cache is safe for concurrent
// use.
type Cache struct {
	dir      string
	maxFile  int64
	maxTotal int64
	ttl      time.Duration
	clock    clock.Clock
	log      *slog.Logger

	mu    sync.Mutex
	blobs map[string]*entry
	refs  map[string]string // SHA-256 of the reference key → blob SHA-256
	total int64
}

// entry is the in-memory state of one blob.
type entry struct {
	mime    string
	size    int64
	used    time.Time // last use
	stamped time.Time // last use as written to the file's mtime
	notes   map[string]string
}

// metaFile is the JSON sidecar of a blob.
type metaFile struct {
	MIME  string            `json:"mime"`
	Size  int64             `json:"size"`
	Notes map[string]string `json:"notes,omitempty"`
}

// OpenCache opens (creating when needed) the cache in cfg.Dir and loads its
// indexes. Leftovers of an interrupted write are removed.
func OpenCache(cfg CacheConfig) (*Cache, error) {
	if cfg.Dir == "" {
		return nil, errors.New("media: CacheConfig.Dir is required")
	}
	c := &Cache{
		dir:      cfg.Dir,
		maxFile:  cmp.Or(cfg.MaxFileBytes, defaultMaxFileBytes),
		maxTotal: cmp.Or(cfg.MaxTotalBytes, defaultMaxTotalBytes),
		ttl:      cmp.Or(cfg.TTL, defaultTTL),
		clock:    clock.OrReal(cfg.Clock),
		log:      cmp.Or(cfg.Logger, slog.Default()),
		blobs:    map[string]*entry{},
		refs:     map[string]string{},
	}
	for _, d := range []string{c.dir, c.path("blobs"), c.path("refs"), c.path("tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("media: cache: %w", err)
		}
	}
	if err := os.RemoveAll(c.path("tmp")); err != nil {
		return nil, fmt.Errorf("media: cache: %w", err)
	}
	if err := os.Mkdir(c.path("tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("media: cache: %w", err)
	}
	if err := c.loadBlobs(); err != nil {
		return nil, err
	}
	if err := c.loadRefs(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cache) path(parts ...string) string {
	return filepath.Join(append([]string{c.dir}, parts...)...)
}

func (c *Cache) blobPath(sha string) string { return c.path("blobs", sha[:2], sha) }
func (c *Cache) metaPath(sha string) string { return c.blobPath(sha) + ".meta" }
func (c *Cache) refPath(kh string) string   { return c.path("refs", kh[:2], kh) }

// isSHA reports whether s is a lowercase hex SHA-256.
func isSHA(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// shards lists the files of each two-letter shard directory under root.
func shards(root string, fn func(dir string, files []os.DirEntry) error) error {
	dirs, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("media: cache: %w", err)
	}
	for _, d := range dirs {
		if !d.IsDir() || len(d.Name()) != 2 {
			continue
		}
		files, err := os.ReadDir(filepath.Join(root, d.Name()))
		if err != nil {
			return fmt.Errorf("media: cache: %w", err)
		}
		if err := fn(d.Name(), files); err != nil {
			return err
		}
	}
	return nil
}

// loadBlobs rebuilds the blob index. A blob whose size differs from its
// sidecar's was cut short and is dropped; a blob without a readable
// sidecar is sniffed again; a sidecar without its blob is removed.
func (c *Cache) loadBlobs() error {
	return shards(c.path("blobs"), func(shard string, files []os.DirEntry) error {
		for _, f := range files {
			name := f.Name()
			if sha, ok := strings.CutSuffix(name, ".meta"); ok {
				if isSHA(sha) && !fileExists(c.blobPath(sha)) {
					_ = os.Remove(c.metaPath(sha))
				}
				continue
			}
			if !isSHA(name) || name[:2] != shard {
				continue
			}
			info, err := f.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return fmt.Errorf("media: cache: %w", err)
			}
			e := &entry{size: info.Size(), used: info.ModTime(), stamped: info.ModTime()}
			var m metaFile
			raw, err := os.ReadFile(c.metaPath(name))
			switch {
			case err == nil && json.Unmarshal(raw, &m) == nil && m.MIME != "":
				if m.Size != e.size {
					c.log.Warn("media: cache: dropping a truncated blob", "sha256", name)
					_ = os.Remove(c.blobPath(name))
					_ = os.Remove(c.metaPath(name))
					continue
				}
				e.mime, e.notes = m.MIME, m.Notes
			default:
				e.mime = sniffFile(c.blobPath(name))
				if err := c.writeMeta(name, e); err != nil {
					return err
				}
			}
			c.blobs[name] = e
			c.total += e.size
		}
		return nil
	})
}

// loadRefs rebuilds the ref index, dropping refs to missing blobs.
func (c *Cache) loadRefs() error {
	return shards(c.path("refs"), func(_ string, files []os.DirEntry) error {
		for _, f := range files {
			kh := f.Name()
			if !isSHA(kh) {
				continue
			}
			raw, err := os.ReadFile(c.refPath(kh))
			sha := strings.TrimSpace(string(raw))
			if err != nil || c.blobs[sha] == nil {
				_ = os.Remove(c.refPath(kh))
				continue
			}
			c.refs[kh] = sha
		}
		return nil
	})
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func sniffFile(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return "application/octet-stream"
	}
	defer func() { _ = f.Close() }()
	var head [sniffLen]byte
	n, _ := io.ReadFull(f, head[:])
	return sniff(head[:n], "")
}

// writeAtomic writes data to path through a temporary file and a rename.
func (c *Cache) writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("media: cache: %w", err)
	}
	f, err := os.CreateTemp(c.path("tmp"), "w-*")
	if err != nil {
		return fmt.Errorf("media: cache: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("media: cache: %w", err)
	}
	return nil
}

func (c *Cache) writeMeta(sha string, e *entry) error {
	raw, err := json.Marshal(metaFile{MIME: e.mime, Size: e.size, Notes: e.notes})
	if err != nil {
		return fmt.Errorf("media: cache: %w", err)
	}
	return c.writeAtomic(c.metaPath(sha), raw)
}

// limit is the cap Put applies for a caller's maxBytes.
func (c *Cache) limit(maxBytes int64) int64 {
	if maxBytes > 0 && maxBytes < c.maxFile {
		return maxBytes
	}
	return c.maxFile
}

// Put stores the content of r and returns its Blob. It reads at most
// min(maxBytes, MaxFileBytes)+1 bytes (maxBytes ≤ 0 means MaxFileBytes):
// content beyond the cap is ErrTooLarge, and nothing is stored. The MIME
// type is sniffed from the bytes; declaredMIME is used only when they do
// not tell. Storing content already held is a no-op that returns the same
// Blob. Put checks ctx between reads, but cannot interrupt a blocked Read.
func (c *Cache) Put(ctx context.Context, r io.Reader, declaredMIME string, maxBytes int64) (Blob, error) {
	limit := c.limit(maxBytes)
	f, err := os.CreateTemp(c.path("tmp"), "put-*")
	if err != nil {
		return Blob{}, fmt.Errorf("media: cache: %w", err)
	}
	tmp := f.Name()
	committed := false
	defer func() {
		if !committed {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	h := sha256.New()
	head := make([]byte, 0, sniffLen)
	buf := make([]byte, 32<<10)
	lr := io.LimitReader(r, limit+1)
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return Blob{}, err
		}
		n, rerr := lr.Read(buf)
		if n > 0 {
			if size += int64(n); size > limit {
				return Blob{}, fmt.Errorf("%w of %d bytes", ErrTooLarge, limit)
			}
			if len(head) < sniffLen {
				head = append(head, buf[:min(n, sniffLen-len(head))]...)
			}
			h.Write(buf[:n])
			if _, err := f.Write(buf[:n]); err != nil {
				return Blob{}, fmt.Errorf("media: cache: %w", err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return Blob{}, fmt.Errorf("media: read: %w", rerr)
		}
	}
	if err := f.Sync(); err != nil {
		return Blob{}, fmt.Errorf("media: cache: %w", err)
	}
	if err := f.Close(); err != nil {
		return Blob{}, fmt.Errorf("media: cache: %w", err)
	}
	sha := hex.EncodeToString(h.Sum(nil))
	e := &entry{mime: sniff(head, declaredMIME), size: size}

	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if old := c.blobs[sha]; old != nil {
		c.touchLocked(sha, old, now)
		return Blob{SHA256: sha, MIME: old.mime, Size: old.size}, nil
	}
	if err := os.MkdirAll(filepath.Dir(c.blobPath(sha)), 0o700); err != nil {
		return Blob{}, fmt.Errorf("media: cache: %w", err)
	}
	if err := os.Rename(tmp, c.blobPath(sha)); err != nil {
		return Blob{}, fmt.Errorf("media: cache: %w", err)
	}
	committed = true
	if err := c.writeMeta(sha, e); err != nil {
		_ = os.Remove(c.blobPath(sha))
		return Blob{}, err
	}
	c.blobs[sha] = e
	c.total += size
	e.stamped = now.Add(-touchEvery) // force the first stamp
	c.touchLocked(sha, e, now)
	return Blob{SHA256: sha, MIME: e.mime, Size: size}, nil
}

// touchLocked marks a blob used at now and writes that to the file's
// mtime at most once a minute. c.mu is held.
func (c *Cache) touchLocked(sha string, e *entry, now time.Time) {
	e.used = now
	if d := now.Sub(e.stamped); d < touchEvery && d >= 0 {
		return
	}
	if err := os.Chtimes(c.blobPath(sha), now, now); err == nil {
		e.stamped = now
	}
}

// lookup returns a blob and marks it used.
func (c *Cache) lookup(sha string) (Blob, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.blobs[sha]
	if e == nil {
		return Blob{}, false
	}
	c.touchLocked(sha, e, c.clock.Now())
	return Blob{SHA256: sha, MIME: e.mime, Size: e.size}, true
}

// Stat returns the blob with this SHA-256 and marks it used.
func (c *Cache) Stat(sha string) (Blob, bool) { return c.lookup(sha) }

// ReadAll returns the content of a blob and marks it used. A blob not in
// the cache is an error that matches fs.ErrNotExist.
func (c *Cache) ReadAll(sha string) ([]byte, Blob, error) {
	b, ok := c.lookup(sha)
	if !ok {
		return nil, Blob{}, fmt.Errorf("media: blob %.12s: %w", sha, fs.ErrNotExist)
	}
	data, err := os.ReadFile(c.blobPath(sha))
	if err != nil {
		return nil, Blob{}, fmt.Errorf("media: blob %.12s: %w", sha, err)
	}
	return data, b, nil
}

// Ref returns the blob a platform reference was stored as (and marks it
// used); false when the reference is unknown or its blob was evicted.
func (c *Cache) Ref(key string) (Blob, bool) {
	kh := hashKey(key)
	c.mu.Lock()
	sha, ok := c.refs[kh]
	c.mu.Unlock()
	if !ok {
		return Blob{}, false
	}
	return c.lookup(sha)
}

// SetRef records that a platform reference is the blob sha, which must be
// in the cache.
func (c *Cache) SetRef(key, sha string) error {
	kh := hashKey(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blobs[sha] == nil {
		return fmt.Errorf("media: ref to blob %.12s: %w", sha, fs.ErrNotExist)
	}
	if c.refs[kh] == sha {
		return nil
	}
	if err := c.writeAtomic(c.refPath(kh), []byte(sha)); err != nil {
		return err
	}
	c.refs[kh] = sha
	return nil
}

// Note returns a text derived from a blob, stored under name by SetNote.
// Names carry the version of what derived the text ("description/v1"),
// so a new algorithm starts afresh.
func (c *Cache) Note(sha, name string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.blobs[sha]; e != nil {
		text, ok := e.notes[name]
		return text, ok
	}
	return "", false
}

// SetNote stores a text derived from a blob, which must be in the cache.
// Notes go when their blob goes.
func (c *Cache) SetNote(sha, name, text string) error {
	if name == "" {
		return errors.New("media: a note needs a name")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.blobs[sha]
	if e == nil {
		return fmt.Errorf("media: note on blob %.12s: %w", sha, fs.ErrNotExist)
	}
	if old, ok := e.notes[name]; ok && old == text {
		return nil
	}
	next := *e
	next.notes = maps.Clone(e.notes)
	if next.notes == nil {
		next.notes = map[string]string{}
	}
	next.notes[name] = text
	if err := c.writeMeta(sha, &next); err != nil {
		return err
	}
	e.notes = next.notes
	return nil
}

// Usage returns how many blobs the cache holds and their total size.
func (c *Cache) Usage() (blobs int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.blobs), c.total
}

// Cleanup removes the blobs not used for TTL, then the least recently used
// ones until the total fits MaxTotalBytes, together with their refs and
// notes. It returns how many blobs it removed.
func (c *Cache) Cleanup(ctx context.Context) (removed int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	var victims, live []string
	total := c.total
	for sha, e := range c.blobs {
		if now.Sub(e.used) > c.ttl {
			victims = append(victims, sha)
			total -= e.size
		} else {
			live = append(live, sha)
		}
	}
	if total > c.maxTotal {
		slices.SortFunc(live, func(a, b string) int {
			return cmp.Or(c.blobs[a].used.Compare(c.blobs[b].used), strings.Compare(a, b))
		})
		for _, sha := range live {
			if total <= c.maxTotal {
				break
			}
			victims = append(victims, sha)
			total -= c.blobs[sha].size
		}
	}
	var errs []error
	for _, sha := range victims {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if err := removeFile(c.blobPath(sha)); err != nil {
			errs = append(errs, err)
			continue
		}
		_ = removeFile(c.metaPath(sha))
		c.total -= c.blobs[sha].size
		delete(c.blobs, sha)
		removed++
	}
	for kh, sha := range c.refs {
		if c.blobs[sha] == nil {
			if err := removeFile(c.refPath(kh)); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(c.refs, kh)
		}
	}
	if removed > 0 {
		c.log.Debug("media: cache cleanup", "removed", removed, "blobs", len(c.blobs), "bytes", c.total)
	}
	return removed, errors.Join(errs...)
}

func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("media: cache: %w", err)
	}
	return nil
}

// Run calls Cleanup at once and then every hour on the cache's clock until
// ctx ends; it returns nil then. Cleanup errors are logged.
func (c *Cache) Run(ctx context.Context) error {
	for {
		if _, err := c.Cleanup(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("media: cache cleanup failed", "err", err)
		}
		if !clock.Sleep(c.clock, ctx.Done(), cleanupEvery) {
			return nil
		}
	}
}
