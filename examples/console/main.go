// Command console is a terminal chat with a persona through the whole
// persona pipeline: every line you type is a private message that goes
// through the durable queue, the gates, the model, the review and the
// chunked sender, and ends with a recorded outcome.
//
//	go run ./examples/console
//
// Data lives in ./data/ (override with PERSONA_DATA), or in PostgreSQL
// when PERSONA_DATABASE_URL is a postgres:// URL. The model comes from
// PERSONA_MODEL_BASE_URL, PERSONA_MODEL_API_KEY (or OPENAI_API_KEY) and
// PERSONA_MODEL; without them an offline demo model answers. PERSONA_SOUL
// points at another SOUL.md; PERSONA_MODEL_VISION=1 says the model takes
// pictures. Commands: /image PATH [caption] sends a picture from a file,
// /why prints the outcome record of your last message, /quit exits (so
// does end of input, after the last reply).
package main

import (
	"bufio"
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/agent/openai"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
)

//go:embed SOUL.md
var defaultSoul string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdin, os.Stdout, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "console:", err)
		os.Exit(1)
	}
}

// run is main without the process globals, so the example is testable.
func run(ctx context.Context, in io.Reader, out io.Writer, getenv func(string) string) error {
	model, desc, err := pickModel(getenv)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, desc)
	soul := defaultSoul
	if path := getenv("PERSONA_SOUL"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read PERSONA_SOUL: %w", err)
		}
		soul = string(b)
	}
	dataDir := getenv("PERSONA_DATA")
	if dataDir == "" {
		dataDir = "data"
	}
	con := newConsole(in, out)
	_, offline := model.(seeing)
	p, err := persona.New(persona.Options{
		Channels:    []channel.Channel{con},
		DataDir:     dataDir,
		DatabaseURL: getenv("PERSONA_DATABASE_URL"),
		Persona:     soul,
		Model:       model,
		Memory:      !offline, // long-term memory needs a real model
		Owners:      []string{you.ID},
		OnOutcome:   con.outcome,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	defer func() { _ = p.Close() }()
	con.lookup = p.Lookup
	fmt.Fprintln(out, "Type a message; /image PATH [caption] sends a picture; /why explains the last outcome; /quit exits.")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	con.quit = cancel
	return p.Run(ctx)
}

// pickModel returns the configured model, or the offline demo model.
func pickModel(getenv func(string) string) (agent.Model, string, error) {
	if cfg, ok := openai.FromEnv(getenv); ok {
		cfg.Vision = getenv("PERSONA_MODEL_VISION") == "1"
		m, err := openai.New(cfg)
		if err != nil {
			return nil, "", err
		}
		return m, fmt.Sprintf("Model: %s at %s", cfg.Model, orDefault(cfg.BaseURL, "the OpenAI API")), nil
	}
	demo := agenttest.New()
	demo.Otherwise(agenttest.Func(offlineReply))
	return seeing{demo}, "No model configured (set PERSONA_MODEL_BASE_URL and PERSONA_MODEL_API_KEY or OPENAI_API_KEY, and PERSONA_MODEL):\n" +
		"running the offline demo model, which only echoes. Everything else is the real pipeline.", nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// seeing is the offline demo model, declared able to take pictures
// (agent.ImageInput), so /image shows the whole vision path offline.
type seeing struct{ *agenttest.Model }

func (seeing) AcceptsImages() bool { return true }

// offlineReply answers from the prompt it was given, so the demo still shows
// that the persona, the history and pictures reach the model.
func offlineReply(_ context.Context, req agent.Request) (*agent.Response, error) {
	if req.Purpose == agent.PurposeVision {
		return &agent.Response{Text: "a picture (the offline demo cannot look at it)", Model: "offline-demo"}, nil
	}
	current, earlier, pictures := "", 0, 0
	for _, m := range req.Messages {
		if m.Role == agent.RoleUser {
			if strings.HasPrefix(m.Content, "[current] ") {
				current = m.Content[strings.Index(m.Content, ": ")+2:]
				pictures = len(m.Parts)
			} else {
				earlier++
			}
		}
	}
	text := fmt.Sprintf("(offline demo) You said %q; my context holds %d earlier message(s) of ours", current, earlier)
	if pictures > 0 {
		text += fmt.Sprintf(", and %d picture(s) came with it", pictures)
	}
	return &agent.Response{Text: text, Model: "offline-demo"}, nil
}

// console is a channel.Channel over a terminal: each input line is a private
// message from "you", each outgoing chunk is printed.
type console struct {
	in     io.Reader
	out    io.Writer
	lookup func(context.Context, string) (inbound.Record, error)
	quit   context.CancelFunc

	outMu sync.Mutex // serialises writes to out

	mu      sync.Mutex
	n       int
	last    string
	pending map[string]bool
	changed chan struct{}
}

func newConsole(in io.Reader, out io.Writer) *console {
	return &console{in: in, out: out, pending: map[string]bool{}, changed: make(chan struct{}, 1)}
}

func (c *console) Name() string { return "console" }

// printf writes to the terminal; the worker goroutines and the input loop
// share it.
func (c *console) printf(format string, a ...any) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	fmt.Fprintf(c.out, format, a...)
}

var (
	you  = channel.Sender{ID: "you", Name: "You"}
	chat = channel.Chat{Kind: channel.Private, ID: "you"}
)

func (c *console) Run(ctx context.Context, sink channel.Sink) error {
	sink.ReportState(ctx, channel.State{Platform: "console", BotID: "persona", Connected: true, Online: true})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(c.in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var line string
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case line, ok = <-lines:
		}
		line = strings.TrimSpace(line)
		switch {
		case !ok || line == "/quit":
			c.waitIdle(ctx)
			c.quit()
			return nil
		case line == "":
		case line == "/why":
			c.why(ctx)
		default:
			segs := []channel.Segment{channel.Text(line)}
			if rest, ok := strings.CutPrefix(line, "/image "); ok {
				var err error
				if segs, err = imageMessage(rest); err != nil {
					c.printf("! %v\n", err)
					continue
				}
			}
			c.mu.Lock()
			c.n++
			ev := channel.Event{Platform: "console", BotID: "persona", Kind: channel.KindMessage, Chat: chat,
				MessageID: fmt.Sprintf("%d-%d", time.Now().UnixNano(), c.n), Time: time.Now(), Sender: you,
				Segments: segs}
			c.last = ev.Key()
			c.pending[c.last] = true
			c.mu.Unlock()
			if err := sink.HandleEvent(ctx, ev); err != nil {
				c.printf("! not accepted: %v\n", err)
			}
		}
	}
}

// imageMessage builds the segments of "/image PATH [caption]": the picture
// (fetched from the file when the pipeline asks, see FetchMedia) and the
// caption.
func imageMessage(arg string) ([]channel.Segment, error) {
	path, caption, _ := strings.Cut(strings.TrimSpace(arg), " ")
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("/image: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("/image: %s is not a file", path)
	}
	segs := []channel.Segment{channel.Image(channel.Media{FileID: abs, Name: filepath.Base(abs), Size: st.Size()})}
	if caption = strings.TrimSpace(caption); caption != "" {
		segs = append(segs, channel.Text(caption))
	}
	return segs, nil
}

// FetchMedia implements channel.MediaFetcher: a picture sent with /image
// is read from its file (the person at the terminal typed the path).
func (c *console) FetchMedia(_ context.Context, _ channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	st, err := os.Stat(m.FileID)
	if err != nil {
		return channel.MediaContent{}, fmt.Errorf("%w: %w", channel.ErrMediaUnavailable, err)
	}
	if req.MaxBytes > 0 && st.Size() > req.MaxBytes {
		return channel.MediaContent{}, channel.ErrMediaTooLarge
	}
	f, err := os.Open(m.FileID)
	if err != nil {
		return channel.MediaContent{}, fmt.Errorf("%w: %w", channel.ErrMediaUnavailable, err)
	}
	return channel.MediaContent{Body: f, Size: st.Size()}, nil
}

func (c *console) Send(_ context.Context, o channel.Outgoing) (channel.Receipt, error) {
	c.mu.Lock()
	c.n++
	id := fmt.Sprintf("out-%d-%d", time.Now().UnixNano(), c.n)
	c.mu.Unlock()
	c.printf("mira> %s\n", strings.ReplaceAll(o.Text, "\n", "\n      "))
	return channel.Receipt{MessageIDs: []string{id}}, nil
}

// outcome is the pipeline's OnOutcome hook.
func (c *console) outcome(id string, _ inbound.Outcome) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// waitIdle waits until every typed message has its outcome.
func (c *console) waitIdle(ctx context.Context) {
	deadline := time.After(5 * time.Minute)
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.changed:
		case <-deadline:
			c.printf("! gave up waiting for %d message(s); they stay queued in the data directory\n", n)
			return
		case <-ctx.Done():
			return
		}
	}
}

func (c *console) why(ctx context.Context) {
	c.mu.Lock()
	id := c.last
	c.mu.Unlock()
	if id == "" {
		c.printf("why: no message yet\n")
		return
	}
	c.waitIdle(ctx)
	r, err := c.lookup(ctx, id)
	if err != nil {
		c.printf("why: %v\n", err)
		return
	}
	c.printf("why: outcome=%s attempts=%d\n     reason: %s\n", r.Outcome.Code, r.Attempts, r.Outcome.Reason)
	if !r.EnqueuedAt.IsZero() && !r.CompletedAt.IsZero() {
		c.printf("     queued %s, done after %s\n", r.EnqueuedAt.Format(time.TimeOnly), r.CompletedAt.Sub(r.EnqueuedAt).Round(time.Millisecond))
	}
	for _, t := range r.Outcome.Tokens {
		c.printf("     tokens (%s, %s): in=%d cached=%d out=%d\n", t.Purpose, t.Model, t.Input, t.CachedInput, t.Output)
	}
}
