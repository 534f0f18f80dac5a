package logbuf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
)

// Buffer is an io.Writer safe for concurrent writers and readers. The zero
// value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Records decodes the buffer as JSON lines (slog's JSON handler) and
// returns, in order, the records whose "msg" is msg. A line that is not a
// JSON object is an error.
func (b *Buffer) Records(msg string) ([]map[string]any, error) {
	b.mu.Lock()
	data := bytes.Clone(b.b.Bytes())
	b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("logbuf: line %d: %w", n, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("logbuf: %w", err)
	}
	return out, nil
}

// TB is the part of testing.TB that MustRecords uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// MustRecords is Records for tests: a line that is not JSON fails t. Call
// it from the test's goroutine.
func (b *Buffer) MustRecords(t TB, msg string) []map[string]any {
	t.Helper()
	recs, err := b.Records(msg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return recs
}
