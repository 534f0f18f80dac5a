package media_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/media"
)

func shaOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func TestCachePutStatReadAll(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := openCache(t, media.CacheConfig{Dir: dir})
	data := pngOf("round trip")
	b := put(t, c, data, "")
	want := media.Blob{SHA256: shaOf(data), MIME: "image/png", Size: int64(len(data))}
	if b != want {
		t.Fatalf("Put = %+v, want %+v", b, want)
	}
	if got, ok := c.Stat(b.SHA256); !ok || got != want {
		t.Fatalf("Stat = %+v, %v", got, ok)
	}
	got, gb, err := c.ReadAll(b.SHA256)
	if err != nil || !bytes.Equal(got, data) || gb != want {
		t.Fatalf("ReadAll = %q, %+v, %v", got, gb, err)
	}
	info, err := os.Stat(filepath.Join(dir, "blobs", b.SHA256[:2], b.SHA256))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("blob mode = %v, want 0600", info.Mode().Perm())
	}
	if again := put(t, c, data, "image/jpeg"); again != want {
		t.Fatalf("second Put = %+v, want %+v", again, want)
	}
	if n, size := c.Usage(); n != 1 || size != int64(len(data)) {
		t.Fatalf("Usage = %d, %d; want one blob", n, size)
	}
	if _, ok := c.Stat(shaOf([]byte("absent"))); ok {
		t.Error("Stat of an absent blob = true")
	}
	if _, _, err := c.ReadAll(shaOf([]byte("absent"))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadAll of an absent blob = %v, want fs.ErrNotExist", err)
	}
	if _, ok := c.Stat("../../etc/passwd"); ok {
		t.Error("Stat of a path = true")
	}
}

// countingReader counts what is read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestCachePutCap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := openCache(t, media.CacheConfig{Dir: dir, MaxFileBytes: 100})
	ctx := context.Background()

	if b, err := c.Put(ctx, bytes.NewReader(bytes.Repeat([]byte{1}, 100)), "", 0); err != nil || b.Size != 100 {
		t.Fatalf("Put at the cap = %+v, %v", b, err)
	}
	for _, tc := range []struct {
		name     string
		size     int64
		maxBytes int64
		cap      int64
	}{
		{"over the file cap", 101, 0, 100},
		{"far over the file cap", 1 << 20, 0, 100},
		{"over maxBytes", 51, 50, 50},
		{"maxBytes above the file cap", 1 << 20, 1 << 30, 100},
	} {
		cr := &countingReader{r: bytes.NewReader(bytes.Repeat([]byte{2}, int(tc.size)))}
		_, err := c.Put(ctx, cr, "", tc.maxBytes)
		if !errors.Is(err, media.ErrTooLarge) || !media.Definitive(err) {
			t.Errorf("%s: err = %v, want ErrTooLarge", tc.name, err)
		}
		if cr.n > tc.cap+1 {
			t.Errorf("%s: read %d bytes, want at most %d", tc.name, cr.n, tc.cap+1)
		}
	}
	if b, err := c.Put(ctx, bytes.NewReader(bytes.Repeat([]byte{3}, 50)), "", 50); err != nil || b.Size != 50 {
		t.Fatalf("Put at maxBytes = %+v, %v", b, err)
	}
	if n, _ := c.Usage(); n != 2 {
		t.Fatalf("Usage = %d blobs, want 2 (nothing stored over the cap)", n)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

func TestCacheSniff(t *testing.T) {
	t.Parallel()
	c := openCache(t, media.CacheConfig{})
	for _, tc := range []struct{ sample, declared, want string }{
		{"png", "", "image/png"},
		{"png", "application/octet-stream", "image/png"},
		{"jpeg", "image/png", "image/jpeg"},
		{"gif", "", "image/gif"},
		{"webp", "", "image/webp"},
		{"bmp", "", "image/bmp"},
		{"silk", "audio/amr", "audio/silk"},
		{"silk-plain", "", "audio/silk"},
		{"amr", "", "audio/amr"},
		{"ogg", "", "audio/ogg"},
		{"mp3", "", "audio/mpeg"},
		{"mp3-frame", "", "audio/mpeg"},
		{"wav", "", "audio/wav"},
		{"mp4", "", "video/mp4"},
		{"m4a", "", "audio/mp4"},
		{"webm", "", "video/webm"},
		{"tgs", "", "application/x-tgsticker"},
		{"html", "image/png", "text/html"},
	} {
		b := put(t, c, samples[tc.sample], tc.declared)
		if b.MIME != tc.want {
			t.Errorf("%s (declared %q): MIME = %q, want %q", tc.sample, tc.declared, b.MIME, tc.want)
		}
	}
	// Bytes that say nothing fall back to the declared type, without
	// its parameters.
	if b := put(t, c, []byte{0, 1, 2, 3, 4, 5}, "Image/HEIC; foo=bar"); b.MIME != "image/heic" {
		t.Errorf("unknown bytes: MIME = %q, want the declared image/heic", b.MIME)
	}
	if b := put(t, c, []byte{0, 1, 2, 3, 4, 6}, ""); b.MIME != "application/octet-stream" {
		t.Errorf("unknown bytes, nothing declared: MIME = %q", b.MIME)
	}
}

func TestCacheTTL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := openCache(t, media.CacheConfig{Dir: dir, TTL: time.Hour, Clock: fake})
	old := put(t, c, pngOf("old"), "")
	if err := c.SetRef("ref-old", old.SHA256); err != nil {
		t.Fatal(err)
	}
	if err := c.SetNote(old.SHA256, media.NoteDescription, "an old picture"); err != nil {
		t.Fatal(err)
	}
	fake.Advance(40 * time.Minute)
	fresh := put(t, c, pngOf("fresh"), "")
	if err := c.SetRef("ref-fresh", fresh.SHA256); err != nil {
		t.Fatal(err)
	}
	fake.Advance(21 * time.Minute)

	removed, err := c.Cleanup(context.Background())
	if err != nil || removed != 1 {
		t.Fatalf("Cleanup = %d, %v; want 1 removed", removed, err)
	}
	if _, ok := c.Stat(old.SHA256); ok {
		t.Error("the expired blob is still there")
	}
	if _, ok := c.Ref("ref-old"); ok {
		t.Error("the expired blob's ref is still there")
	}
	if _, ok := c.Note(old.SHA256, media.NoteDescription); ok {
		t.Error("the expired blob's note is still there")
	}
	if b, ok := c.Ref("ref-fresh"); !ok || b != fresh {
		t.Errorf("Ref(fresh) = %+v, %v", b, ok)
	}
	if n := countFiles(t, filepath.Join(dir, "refs")); n != 1 {
		t.Errorf("%d ref files on disk, want 1", n)
	}
	if n := countFiles(t, filepath.Join(dir, "blobs")); n != 2 { // fresh and its .meta
		t.Errorf("%d blob files on disk, want 2", n)
	}
}

func countFiles(t *testing.T, root string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCacheLRU(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := openCache(t, media.CacheConfig{MaxTotalBytes: 250, Clock: fake})
	blob := func(tag byte) media.Blob { return put(t, c, bytes.Repeat([]byte{tag}, 100), "") }
	a := blob('a')
	fake.Advance(time.Minute)
	b := blob('b')
	fake.Advance(time.Minute)
	if _, ok := c.Stat(a.SHA256); !ok { // a is now used more recently than b
		t.Fatal("a is missing")
	}
	fake.Advance(time.Minute)
	cc := blob('c')
	if n, size := c.Usage(); n != 3 || size != 300 {
		t.Fatalf("Usage = %d, %d", n, size)
	}

	removed, err := c.Cleanup(context.Background())
	if err != nil || removed != 1 {
		t.Fatalf("Cleanup = %d, %v; want 1 removed", removed, err)
	}
	if _, ok := c.Stat(b.SHA256); ok {
		t.Error("the least recently used blob survived")
	}
	for _, keep := range []media.Blob{a, cc} {
		if _, ok := c.Stat(keep.SHA256); !ok {
			t.Errorf("blob %.8s was evicted", keep.SHA256)
		}
	}
	if n, size := c.Usage(); n != 2 || size != 200 {
		t.Fatalf("Usage after cleanup = %d, %d", n, size)
	}
	if removed, _ := c.Cleanup(context.Background()); removed != 0 {
		t.Errorf("second Cleanup removed %d", removed)
	}
}

func TestCacheReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := openCache(t, media.CacheConfig{Dir: dir})
	img := put(t, c, pngOf("kept"), "")
	heic := put(t, c, []byte{0, 9, 9, 9}, "image/heic") // type known only from the declaration
	if err := c.SetRef("onebot\x00group:1\x00file-1", img.SHA256); err != nil {
		t.Fatal(err)
	}
	if err := c.SetNote(img.SHA256, media.NoteDescription, "a kept picture"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetNote(img.SHA256, media.NoteTranscript, ""); err != nil {
		t.Fatal(err)
	}
	// Leftovers of a crash: a temp file, a sidecar without its blob, a
	// blob cut short (its size differs from the sidecar's), a blob
	// without a sidecar, a ref to a missing blob.
	cut := put(t, c, pngOf("cut short"), "")
	bare := put(t, c, jpegOf("bare"), "")
	ghost := shaOf([]byte("ghost"))
	mustWrite(t, filepath.Join(dir, "tmp", "put-123"), []byte("partial"))
	mustWrite(t, filepath.Join(dir, "blobs", ghost[:2], ghost+".meta"), []byte(`{"mime":"image/png","size":5}`))
	mustWrite(t, filepath.Join(dir, "blobs", cut.SHA256[:2], cut.SHA256), []byte("\x89PNG"))
	if err := os.Remove(filepath.Join(dir, "blobs", bare.SHA256[:2], bare.SHA256+".meta")); err != nil {
		t.Fatal(err)
	}
	if err := c.SetRef("to-cut", cut.SHA256); err != nil {
		t.Fatal(err)
	}

	r := openCache(t, media.CacheConfig{Dir: dir})
	if got, ok := r.Stat(img.SHA256); !ok || got != img {
		t.Errorf("Stat after reopen = %+v, %v", got, ok)
	}
	if got, ok := r.Stat(heic.SHA256); !ok || got != heic {
		t.Errorf("declared type after reopen = %+v, %v", got, ok)
	}
	if got, ok := r.Stat(bare.SHA256); !ok || got != bare {
		t.Errorf("blob without sidecar after reopen = %+v, %v; want it sniffed again", got, ok)
	}
	if got, ok := r.Ref("onebot\x00group:1\x00file-1"); !ok || got != img {
		t.Errorf("Ref after reopen = %+v, %v", got, ok)
	}
	if text, ok := r.Note(img.SHA256, media.NoteDescription); !ok || text != "a kept picture" {
		t.Errorf("Note after reopen = %q, %v", text, ok)
	}
	if text, ok := r.Note(img.SHA256, media.NoteTranscript); !ok || text != "" {
		t.Errorf("empty Note after reopen = %q, %v", text, ok)
	}
	if _, ok := r.Stat(cut.SHA256); ok {
		t.Error("a truncated blob survived reopening")
	}
	if _, ok := r.Ref("to-cut"); ok {
		t.Error("a ref to a dropped blob survived reopening")
	}
	if n, _ := r.Usage(); n != 3 {
		t.Errorf("Usage after reopen = %d blobs, want 3", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "blobs", ghost[:2], ghost+".meta")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("orphan sidecar: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
}

func mustWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCacheRefsAndNotesNeedTheBlob(t *testing.T) {
	t.Parallel()
	c := openCache(t, media.CacheConfig{})
	absent := shaOf([]byte("absent"))
	if err := c.SetRef("k", absent); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SetRef to an absent blob = %v", err)
	}
	if err := c.SetNote(absent, media.NoteDescription, "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SetNote on an absent blob = %v", err)
	}
	b := put(t, c, pngOf("notes"), "")
	if err := c.SetNote(b.SHA256, "", "x"); err == nil {
		t.Error("SetNote without a name succeeded")
	}
	if _, ok := c.Ref("unknown"); ok {
		t.Error("Ref of an unknown key = true")
	}
	if _, ok := c.Note(b.SHA256, media.NoteSticker); ok {
		t.Error("Note never set = true")
	}
	if _, err := media.OpenCache(media.CacheConfig{}); err == nil {
		t.Error("OpenCache without Dir succeeded")
	}
}

func TestCacheConcurrentPuts(t *testing.T) {
	t.Parallel()
	c := openCache(t, media.CacheConfig{})
	same := bytes.Repeat(pngOf("same"), 5000) // several reads per Put
	const n = 16
	got := make([]media.Blob, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			data := same
			if i%2 == 1 {
				data = pngOf(fmt.Sprint("different ", i))
			}
			got[i], errs[i] = c.Put(context.Background(), bytes.NewReader(data), "", 0)
			if errs[i] == nil {
				errs[i] = c.SetNote(got[i].SHA256, media.NoteDescription, fmt.Sprint("note ", i))
			}
			_, _ = c.Cleanup(context.Background())
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Put %d: %v", i, errs[i])
		}
		if i%2 == 0 && got[i] != got[0] {
			t.Errorf("Put %d of the same content = %+v, want %+v", i, got[i], got[0])
		}
	}
	if count, _ := c.Usage(); count != 1+n/2 {
		t.Errorf("Usage = %d blobs, want %d", count, 1+n/2)
	}
	data, _, err := c.ReadAll(got[0].SHA256)
	if err != nil || !bytes.Equal(data, same) {
		t.Fatalf("ReadAll of the shared blob: %v", err)
	}
}

func TestCacheRun(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := openCache(t, media.CacheConfig{TTL: 90 * time.Minute, Clock: fake})
	put(t, c, pngOf("runs out"), "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitFor(t, func() bool { return fake.Pending() == 1 }) // first cleanup done, sleeping
	if n, _ := c.Usage(); n != 1 {
		t.Fatalf("the first cleanup removed a fresh blob")
	}
	fake.Advance(time.Hour)
	waitFor(t, func() bool { return fake.Pending() == 1 })
	fake.Advance(time.Hour) // 2 h: past the TTL
	waitFor(t, func() bool { n, _ := c.Usage(); return n == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}

// waitFor polls cond until it holds (bounded by the test's deadline).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(time.Millisecond)
	}
}
