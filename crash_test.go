package persona_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/store"
)

// The crash test runs the pipeline in a child process (this test binary,
// re-executed) whose channel is a loopback connection to the parent. The
// parent plays the platform: it streams messages, redelivers the ones the
// child has not acknowledged, records every chunk the child sends, and
// SIGKILLs the child at random moments.

const crashChildEnv = "PERSONA_CRASH_CHILD"

type wireMsg struct {
	Type    string            `json:"type"`
	Key     string            `json:"key,omitempty"`
	ID      int               `json:"id,omitempty"`
	Event   *channel.Event    `json:"event,omitempty"`
	Out     *channel.Outgoing `json:"out,omitempty"`
	Receipt []string          `json:"receipt,omitempty"`
	Chat    *channel.Chat     `json:"chat,omitempty"`
	History []channel.Event   `json:"history,omitempty"`
}

// platform is the parent side of the loopback channel.
type platform struct {
	mu      sync.Mutex
	events  []channel.Event
	fed     int // events[:fed] have been released to the stream
	acked   map[string]bool
	sends   map[string]int // by chunk fingerprint
	texts   map[string]string
	byText  map[string]int             // delivered chunk texts
	chats   map[string][]channel.Event // what the bot sent, per chat (its history)
	active  sync.WaitGroup             // serving connections
	nextID  int
	changed chan struct{} // closed and replaced when events are released
}

func (pl *platform) serve(t *testing.T, conn net.Conn) {
	defer conn.Close()
	enc := json.NewEncoder(conn)
	var wmu sync.Mutex
	write := func(m wireMsg) error {
		wmu.Lock()
		defer wmu.Unlock()
		return enc.Encode(m)
	}
	closed := make(chan struct{})
	defer close(closed)
	go func() { // feeder: every released, unacknowledged event, then new ones
		sent := map[string]bool{}
		for {
			pl.mu.Lock()
			changed := pl.changed
			var batch []channel.Event
			for _, ev := range pl.events[:pl.fed] {
				if k := ev.Key(); !pl.acked[k] && !sent[k] {
					batch = append(batch, ev)
					sent[k] = true
				}
			}
			pl.mu.Unlock()
			for _, ev := range batch {
				if write(wireMsg{Type: "event", Event: &ev}) != nil {
					return
				}
			}
			select {
			case <-changed:
			case <-closed:
				return
			}
		}
	}()
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m wireMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Errorf("platform: bad frame: %v", err)
			return
		}
		switch m.Type {
		case "ack":
			pl.mu.Lock()
			pl.acked[m.Key] = true
			pl.mu.Unlock()
		case "send":
			pl.mu.Lock()
			pl.nextID++
			id := fmt.Sprintf("p-%d", pl.nextID)
			pl.sends[m.Out.IdempotencyKey]++
			pl.texts[m.Out.IdempotencyKey] = m.Out.Text
			pl.byText[m.Out.Text]++
			pl.chats[m.Out.Chat.String()] = append(pl.chats[m.Out.Chat.String()], channel.Event{
				Platform: "loop", BotID: "bot", Kind: channel.KindSelf, Chat: m.Out.Chat, MessageID: id,
				Time: time.Now(), Sender: channel.Sender{ID: "bot"}, Segments: []channel.Segment{channel.Text(m.Out.Text)}})
			pl.mu.Unlock()
			time.Sleep(3 * time.Millisecond) // the platform takes a moment to answer
			if write(wireMsg{Type: "receipt", ID: m.ID, Receipt: []string{id}}) != nil {
				return
			}
		case "history": // newest first, like a platform's history API
			pl.mu.Lock()
			sent := pl.chats[m.Chat.String()]
			page := make([]channel.Event, 0, 50)
			for i := len(sent) - 1; i >= 0 && len(page) < 50; i-- {
				page = append(page, sent[i])
			}
			pl.mu.Unlock()
			if write(wireMsg{Type: "historypage", ID: m.ID, History: page}) != nil {
				return
			}
		}
	}
}

func (pl *platform) release(n int) {
	pl.mu.Lock()
	pl.fed = min(len(pl.events), pl.fed+n)
	close(pl.changed)
	pl.changed = make(chan struct{})
	pl.mu.Unlock()
}

func TestCrashSafety(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("child process")
	}
	if testing.Short() {
		t.Skip("spawns and kills child processes")
	}
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))

	pl := &platform{acked: map[string]bool{}, sends: map[string]int{}, texts: map[string]string{},
		byText: map[string]int{}, chats: map[string][]channel.Event{}, changed: make(chan struct{})}
	const total = 150
	start := time.Now()
	for i := range total {
		ev := channel.Event{Platform: "loop", BotID: "bot", Kind: channel.KindMessage, MessageID: fmt.Sprintf("m%03d", i),
			Time: start.Add(time.Duration(i) * time.Millisecond), Sender: channel.Sender{ID: fmt.Sprintf("u%d", i%7), Name: fmt.Sprintf("User %d", i%7)},
			Segments: []channel.Segment{channel.Text(fmt.Sprintf("message %d", i))}}
		switch i % 5 {
		case 0: // unprompted group chatter
			ev.Chat = channel.Chat{Kind: channel.Group, ID: "g1"}
		case 1: // a mention in a group
			ev.Chat = channel.Chat{Kind: channel.Group, ID: "g2"}
			ev.Segments = append([]channel.Segment{channel.Mention("bot")}, ev.Segments...)
		default:
			ev.Chat = channel.Chat{Kind: channel.Private, ID: ev.Sender.ID}
		}
		pl.events = append(pl.events, ev)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// A killed child's last frames are read to the end before the
			// next child is served, so its history is complete.
			pl.active.Wait()
			pl.active.Add(1)
			go func() {
				defer pl.active.Done()
				pl.serve(t, conn)
			}()
		}
	}()

	startChild := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
		cmd.Env = append(os.Environ(), crashChildEnv+"=1", "PERSONA_CRASH_ADDR="+ln.Addr().String(), "PERSONA_CRASH_DIR="+dir)
		logf, err := os.OpenFile(filepath.Join(dir, "child.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		require.NoError(t, err)
		cmd.Stdout, cmd.Stderr = logf, logf
		require.NoError(t, cmd.Start())
		return cmd
	}
	const kills = 25
	for k := range kills {
		pl.release(total / kills)
		cmd := startChild()
		time.Sleep(time.Duration(20+rng.IntN(400)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		t.Logf("kill %d done", k+1)
	}
	pl.mu.Lock()
	t.Logf("before the final run: %d events acknowledged, %d chunks delivered", len(pl.acked), len(pl.sends))
	pl.mu.Unlock()
	pl.release(total)
	final := startChild()
	defer func() { _ = final.Process.Kill(); _ = final.Wait() }()

	db, err := store.Open(filepath.Join(dir, "persona.db"), store.Options{})
	require.NoError(t, err)
	defer db.Close()
	ctx := t.Context()
	deadline := time.Now().Add(3 * time.Minute)
	var recs []inbound.Record
	for {
		recs, err = db.Records(ctx, store.RecordQuery{})
		require.NoError(t, err)
		done := 0
		for _, r := range recs {
			if r.Status == inbound.StatusDone {
				done++
			}
		}
		if done == total {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "child.log"))
			t.Fatalf("only %d of %d messages finished; child log tail:\n%s", done, total, tail(string(log), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Every message reached exactly one final outcome.
	require.Len(t, recs, total)
	seen := map[string]bool{}
	counts := map[string]int{}
	for _, r := range recs {
		require.False(t, seen[r.ID], "two records for %s", r.ID)
		seen[r.ID] = true
		require.True(t, r.Outcome.Code.Valid(), "record %s has no valid outcome: %+v", r.ID, r.Outcome)
		counts[string(r.Outcome.Code)]++
	}
	for _, ev := range pl.events {
		require.True(t, seen[ev.Key()], "message %s has no record", ev.Key())
	}
	t.Logf("outcomes: %v", counts)
	require.Equal(t, total/5, counts["ignored_proactive_off"])

	// No chunk was delivered twice, and none was lost: every answered
	// message got all three of its chunks.
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for fp, n := range pl.sends {
		require.Equal(t, 1, n, "chunk %q delivered %d times", pl.texts[fp], n)
	}
	for _, ev := range pl.events {
		if ev.Chat.ID == "g1" {
			continue // unprompted chatter is not answered
		}
		for _, part := range []string{"re ", "part two of ", "part three of "} {
			text := part + ev.Text()
			require.Equal(t, 1, pl.byText[text], "chunk %q delivered %d times", text, pl.byText[text])
		}
	}
	t.Logf("%d chunks delivered, each once", len(pl.sends))
	log, err := os.ReadFile(filepath.Join(dir, "child.log"))
	require.NoError(t, err)
	t.Logf("chunks whose send was cut by a kill: %d found in the chat history, %d missing and sent again, %d unknown",
		strings.Count(string(log), "delivery_reconciled"), strings.Count(string(log), "delivery_not_found"),
		strings.Count(string(log), "delivery_unknown"))
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// loopChannel is the child's side: events from the parent, sends to it.
type loopChannel struct {
	conn  net.Conn
	enc   *json.Encoder
	mu    sync.Mutex
	next  int
	wait  map[int]chan []string
	pages map[int][]channel.Event
}

func (c *loopChannel) Name() string { return "loop" }

func (c *loopChannel) write(m wireMsg) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enc.Encode(m)
}

func (c *loopChannel) Run(ctx context.Context, sink channel.Sink) error {
	go func() { <-ctx.Done(); c.conn.Close() }()
	sink.ReportState(ctx, channel.State{Platform: "loop", BotID: "bot", Connected: true, Online: true})
	sc := bufio.NewScanner(c.conn)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m wireMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return err
		}
		switch m.Type {
		case "event":
			if err := sink.HandleEvent(ctx, *m.Event); err != nil {
				continue // not acknowledged: the platform redelivers
			}
			if err := c.write(wireMsg{Type: "ack", Key: m.Event.Key()}); err != nil {
				return err
			}
		case "receipt", "historypage":
			c.mu.Lock()
			ch := c.wait[m.ID]
			delete(c.wait, m.ID)
			if m.Type == "historypage" {
				c.pages[m.ID] = m.History
			}
			c.mu.Unlock()
			if ch != nil {
				ch <- m.Receipt
			}
		}
	}
	return nil
}

// FetchHistory asks the platform for the chat's newest messages (the bot's
// own, which is what delivery reconciliation looks for).
func (c *loopChannel) FetchHistory(ctx context.Context, q channel.HistoryQuery) (channel.HistoryPage, error) {
	ch := make(chan []string, 1)
	c.mu.Lock()
	c.next++
	id := c.next
	c.wait[id] = ch
	c.mu.Unlock()
	if err := c.write(wireMsg{Type: "history", ID: id, Chat: &q.Chat}); err != nil {
		return channel.HistoryPage{}, channel.ErrOffline
	}
	select {
	case <-ch:
		c.mu.Lock()
		page := c.pages[id]
		delete(c.pages, id)
		c.mu.Unlock()
		return channel.HistoryPage{Events: page}, nil
	case <-ctx.Done():
		return channel.HistoryPage{}, ctx.Err()
	}
}

func (c *loopChannel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	ch := make(chan []string, 1)
	c.mu.Lock()
	c.next++
	id := c.next
	c.wait[id] = ch
	c.mu.Unlock()
	if err := c.write(wireMsg{Type: "send", ID: id, Out: &out}); err != nil {
		return channel.Receipt{}, channel.ErrOffline
	}
	select {
	case ids := <-ch:
		return channel.Receipt{MessageIDs: ids}, nil
	case <-ctx.Done():
		return channel.Receipt{}, ctx.Err()
	}
}

var messageRE = regexp.MustCompile(`message \d+`)

// TestCrashChild is the child process of TestCrashSafety.
func TestCrashChild(t *testing.T) {
	if os.Getenv(crashChildEnv) == "" {
		t.Skip("only runs as the child of TestCrashSafety")
	}
	conn, err := net.Dial("tcp", os.Getenv("PERSONA_CRASH_ADDR"))
	require.NoError(t, err)
	model := agenttest.New()
	model.Otherwise(agenttest.Func(func(ctx context.Context, req agent.Request) (*agent.Response, error) {
		last := messageRE.FindString(req.Messages[len(req.Messages)-1].Content)
		time.Sleep(10 * time.Millisecond) // a model takes a moment
		return &agent.Response{Text: "re " + last + "[persona-msg]part two of " + last + "[persona-msg]part three of " + last}, nil
	}))
	p, err := persona.New(persona.Options{
		Channels:   []channel.Channel{&loopChannel{conn: conn, enc: json.NewEncoder(conn), wait: map[int]chan []string{}, pages: map[int][]channel.Event{}}},
		DataDir:    os.Getenv("PERSONA_CRASH_DIR"),
		Model:      model,
		Lease:      time.Second,
		RenewEvery: 300 * time.Millisecond,
		ClaimPoll:  100 * time.Millisecond,
		NoPacing:   true,
		NoRouter:   true,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.Run(t.Context()))
}
