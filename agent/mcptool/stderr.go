package mcptool

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Limits of what is kept and logged of a stdio server's stderr.
const (
	stderrTailBytes = 2048 // kept for error messages
	stderrLineBytes = 1024 // longest logged line
	stderrMaxLines  = 200  // logged lines per process
)

// stderrTail receives a stdio server's stderr: it logs each line at debug
// level (up to stderrMaxLines per process) and keeps the last bytes so a
// start failure can say what the server complained about.
type stderrTail struct {
	log *slog.Logger

	mu      sync.Mutex
	tail    []byte
	line    []byte
	logged  int
	dropped bool
}

func newStderrTail(log *slog.Logger) *stderrTail { return &stderrTail{log: log} }

// Write implements io.Writer; it never fails.
func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tail = append(t.tail, p...)
	if over := len(t.tail) - stderrTailBytes; over > 0 {
		t.tail = append(t.tail[:0], t.tail[over:]...)
	}
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			t.line = appendCapped(t.line, rest)
			break
		}
		t.line = appendCapped(t.line, rest[:i])
		t.emitLocked()
		rest = rest[i+1:]
	}
	return len(p), nil
}

func appendCapped(dst, src []byte) []byte {
	if room := stderrLineBytes - len(dst); room < len(src) {
		src = src[:max(room, 0)]
	}
	return append(dst, src...)
}

func (t *stderrTail) emitLocked() {
	line := strings.TrimSpace(string(t.line))
	t.line = t.line[:0]
	if line == "" {
		return
	}
	if t.logged >= stderrMaxLines {
		if !t.dropped {
			t.dropped = true
			t.log.LogAttrs(context.Background(), slog.LevelDebug, "mcp server stderr: further lines not logged")
		}
		return
	}
	t.logged++
	t.log.LogAttrs(context.Background(), slog.LevelDebug, "mcp server stderr", slog.String("line", line))
}

// last returns the last non-empty lines of stderr, at most 500 bytes.
func (t *stderrTail) last() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	s := strings.TrimSpace(strings.ToValidUTF8(string(t.tail), "?"))
	t.mu.Unlock()
	if len(s) > 500 {
		s = s[len(s)-500:]
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
		s = strings.ToValidUTF8(s, "")
	}
	return s
}
