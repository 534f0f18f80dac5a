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
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store/postgres"
)

// The scale-out test runs one bot as three processes (this test binary,
// re-executed: TestScaleoutChild) on one PostgreSQL schema. The parent
// plays the platform over loopback, like the crash tests' platform, but a
// connection to it can be held by one process at a time: the children
// take turns holding it (package cluster), every child claims turns from
// the shared queue, and a child that does not hold the connection sends
// its chunks through the holder. The parent kills children at random,
// the holder among them, and restarts them.

const (
	scaleChildEnv = "PERSONA_SCALE_CHILD"
	scaleURLEnv   = "PERSONA_SCALE_URL"
	scaleAddrEnv  = "PERSONA_SCALE_ADDR"
	scaleDirEnv   = "PERSONA_SCALE_DIR"
)

// scalePlatform is the parent's side.
type scalePlatform struct {
	t  *testing.T
	ln net.Listener

	mu       sync.Mutex
	events   []channel.Event
	feed     []int // released event indexes
	acked    map[string]bool
	chats    map[string][]channel.Event
	sends    map[string]int // deliveries by idempotency key
	texts    map[string]string
	byText   map[string]int
	open     map[int]net.Conn // open connections by child id
	holds    []int            // child ids in the order they connected
	overlaps []string
	nextID   int
	changed  chan struct{}
}

func newScalePlatform(t *testing.T, events []channel.Event) *scalePlatform {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	pl := &scalePlatform{t: t, ln: ln, events: events, acked: map[string]bool{}, chats: map[string][]channel.Event{},
		sends: map[string]int{}, texts: map[string]string{}, byText: map[string]int{}, open: map[int]net.Conn{},
		changed: make(chan struct{})}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go pl.serve(conn)
		}
	}()
	return pl
}

func (pl *scalePlatform) notifyLocked() {
	close(pl.changed)
	pl.changed = make(chan struct{})
}

func (pl *scalePlatform) release(idx []int) {
	now := time.Now()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, i := range idx {
		pl.events[i].Time = now
		pl.feed = append(pl.feed, i)
		c := pl.events[i].Chat.String()
		pl.chats[c] = append(pl.chats[c], pl.events[i])
	}
	pl.notifyLocked()
}

// holder returns the child holding the connection (-1: none).
func (pl *scalePlatform) holder() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for id := range pl.open {
		return id
	}
	return -1
}

func (pl *scalePlatform) serve(conn net.Conn) {
	defer conn.Close()
	enc := json.NewEncoder(conn)
	var wmu sync.Mutex
	write := func(m wireMsg) error {
		wmu.Lock()
		defer wmu.Unlock()
		return enc.Encode(m)
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if !sc.Scan() {
		return
	}
	var hello wireMsg
	if json.Unmarshal(sc.Bytes(), &hello) != nil || hello.Type != "hello" {
		return
	}
	id := hello.Gen
	// A killed holder's connection closes when its process dies; the
	// platform may see the next holder's connection first, so it gives
	// the old one a moment before it calls the two an overlap.
	for wait := 0; ; wait++ {
		pl.mu.Lock()
		if len(pl.open) == 0 {
			pl.open[id] = conn
			pl.holds = append(pl.holds, id)
			pl.mu.Unlock()
			break
		}
		if wait == 300 {
			var others []int
			for o := range pl.open {
				others = append(others, o)
			}
			pl.overlaps = append(pl.overlaps, fmt.Sprintf("child %d connected while child(ren) %v held the connection", id, others))
			pl.open[id] = conn
			pl.mu.Unlock()
			break
		}
		pl.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	defer func() {
		pl.mu.Lock()
		if pl.open[id] == conn {
			delete(pl.open, id)
		}
		pl.mu.Unlock()
	}()

	closed := make(chan struct{})
	defer close(closed)
	go func() { // every released, unacknowledged event, then new ones
		sent := map[string]bool{}
		for {
			pl.mu.Lock()
			changed := pl.changed
			var batch []channel.Event
			for _, i := range pl.feed {
				if k := pl.events[i].Key(); !pl.acked[k] && !sent[k] {
					batch = append(batch, pl.events[i])
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
	for sc.Scan() {
		var m wireMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return // a frame cut short by a kill
		}
		switch m.Type {
		case "ack":
			pl.mu.Lock()
			pl.acked[m.Key] = true
			pl.mu.Unlock()
		case "send":
			pl.mu.Lock()
			pl.nextID++
			mid := fmt.Sprintf("p-%d", pl.nextID)
			out := m.Out
			pl.sends[out.IdempotencyKey]++
			pl.texts[out.IdempotencyKey] = out.Text
			pl.byText[out.Text]++
			self := channel.Event{Platform: "loop", BotID: "bot", Kind: channel.KindSelf, Chat: out.Chat, MessageID: mid,
				Time: time.Now(), Sender: channel.Sender{ID: "bot", IsBot: true}, Segments: []channel.Segment{channel.Text(out.Text)}}
			pl.chats[out.Chat.String()] = append(pl.chats[out.Chat.String()], self)
			pl.mu.Unlock()
			go func() {
				time.Sleep(2 * time.Millisecond)
				_ = write(wireMsg{Type: "receipt", ID: m.ID, Receipt: []string{mid}})
			}()
		case "history":
			pl.mu.Lock()
			all := pl.chats[m.Chat.String()]
			end := len(all)
			if n, err := strconv.Atoi(m.Cursor); err == nil && n < end {
				end = max(n, 0)
			}
			size := m.Limit
			if size <= 0 || size > 25 {
				size = 25
			}
			start := max(0, end-size)
			page := make([]channel.Event, 0, end-start)
			for i := end - 1; i >= start; i-- {
				page = append(page, all[i])
			}
			next := ""
			if start > 0 {
				next = strconv.Itoa(start)
			}
			pl.mu.Unlock()
			_ = write(wireMsg{Type: "historypage", ID: m.ID, History: page, Next: next})
		}
	}
}

// allAcked reports whether every released event was acknowledged.
func (pl *scalePlatform) allAcked() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, i := range pl.feed {
		if !pl.acked[pl.events[i].Key()] {
			return false
		}
	}
	return true
}

// scaleChild is one child process.
type scaleChild struct {
	id   int
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startScaleChild(t *testing.T, id int, url, addr, dir string) *scaleChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleoutChild$", "-test.v")
	cdir := filepath.Join(dir, fmt.Sprintf("child%d", id))
	require.NoError(t, os.MkdirAll(cdir, 0o700))
	cmd.Env = append(os.Environ(), scaleChildEnv+"=1", scaleURLEnv+"="+url, scaleAddrEnv+"="+addr,
		scaleDirEnv+"="+cdir, crashGenEnv+"="+strconv.Itoa(id))
	logf, err := os.OpenFile(filepath.Join(dir, "children.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	c := &scaleChild{id: id, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		_ = logf.Close()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

// TestScaleoutCrash: three processes on one PostgreSQL database, 2,000
// messages over 100 chats, random SIGKILLs of any process (the one holding
// the platform connection among them) and restarts. Every message ends
// with exactly one outcome and no chunk reaches a chat twice.
func TestScaleoutCrash(t *testing.T) {
	if os.Getenv(scaleChildEnv) != "" || os.Getenv(crashChildEnv) != "" {
		t.Skip("child process")
	}
	if testing.Short() {
		t.Skip("spawns and kills child processes")
	}
	url := pgtest.Schema(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 23))

	const total, chats = 2000, 100
	events := make([]channel.Event, total)
	answered := make([]bool, total)
	for i := range events {
		c := i % chats
		var chat channel.Chat
		var from channel.Sender
		mention := false
		if c < 60 {
			chat = channel.Chat{Kind: channel.Group, ID: fmt.Sprintf("g%d", c)}
			from = channel.Sender{ID: fmt.Sprintf("u%d", (i/chats)%7), Name: fmt.Sprintf("User %d", (i/chats)%7)}
			mention = i%8 != 0
		} else {
			chat = channel.Chat{Kind: channel.Private, ID: fmt.Sprintf("p%d", c)}
			from = channel.Sender{ID: chat.ID, Name: "Person " + chat.ID}
		}
		events[i] = channel.Event{Platform: "loop", BotID: "bot", Kind: channel.KindMessage, Chat: chat,
			MessageID: fmt.Sprintf("m%04d", i), Sender: from, Segments: []channel.Segment{channel.Text(fmt.Sprintf("message %d", i))}}
		if mention {
			events[i].Segments = append([]channel.Segment{channel.Mention("bot")}, events[i].Segments...)
		}
		answered[i] = mention || chat.Kind == channel.Private
	}
	pl := newScalePlatform(t, events)
	dir := t.TempDir()
	addr := pl.ln.Addr().String()
	children := make([]*scaleChild, 3)
	for i := range children {
		children[i] = startScaleChild(t, i, url, addr, dir)
	}
	if keep := os.Getenv(crashKeepEnv); keep != "" {
		t.Cleanup(func() {
			if b, err := os.ReadFile(filepath.Join(dir, "children.log")); err == nil {
				_ = os.WriteFile(filepath.Join(keep, fmt.Sprintf("scaleout-%d.log", time.Now().UnixNano())), b, 0o600)
			}
		})
	}
	logTail := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "children.log"))
		return tail(string(b), 8000)
	}

	// Messages arrive in batches of 40 every 200 ms (10 s in all) while
	// a child is killed every 0.8 to 2 s, every other time the holder of
	// the connection, and started again 0.3 to 1 s later.
	began := time.Now()
	stopKills := make(chan struct{})
	var killLog []string
	var holderKills int
	var kmu sync.Mutex
	killsDone := make(chan struct{})
	go func() {
		defer close(killsDone)
		for k := 0; ; k++ {
			select {
			case <-stopKills:
				return
			case <-time.After(time.Duration(800+rng.IntN(1200)) * time.Millisecond):
			}
			victim := rng.IntN(len(children))
			what := "at random"
			if k%2 == 0 {
				if h := pl.holder(); h >= 0 {
					victim, what = h, "holding the connection"
				}
			}
			c := children[victim]
			_ = c.cmd.Process.Kill()
			<-c.done
			kmu.Lock()
			killLog = append(killLog, fmt.Sprintf("child %d (%s) at %s", victim, what, time.Since(began).Round(time.Millisecond)))
			if what != "at random" {
				holderKills++
			}
			kmu.Unlock()
			time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
			children[victim] = startScaleChild(t, victim, url, addr, dir)
		}
	}()
	for start := 0; start < total; start += 40 {
		idx := make([]int, 0, 40)
		for i := start; i < min(total, start+40); i++ {
			idx = append(idx, i)
		}
		pl.release(idx)
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a few kills while the backlog is worked off
	close(stopKills)
	<-killsDone

	ctx := t.Context()
	db, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer db.Close()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		pending, err := db.ListRecords(ctx, inbound.RecordQuery{Status: inbound.StatusPending, Limit: 1})
		require.NoError(t, err)
		leased, err := db.ListRecords(ctx, inbound.RecordQuery{Status: inbound.StatusLeased, Limit: 1})
		require.NoError(t, err)
		if pl.allAcked() && len(pending.Records) == 0 && len(leased.Records) == 0 {
			recs, err := allRecords(ctx, db)
			require.NoError(t, err)
			if len(recs) >= total {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled after 4 minutes (acked: %v, pending: %d, leased: %d); children's log tail:\n%s",
				pl.allAcked(), len(pending.Records), len(leased.Records), logTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(began)
	for _, c := range children {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range children {
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("child %d did not stop; log tail:\n%s", c.id, logTail())
		}
	}

	recs, err := allRecords(ctx, db)
	require.NoError(t, err)
	byID := map[string]inbound.Record{}
	for _, r := range recs {
		_, dup := byID[r.ID]
		require.False(t, dup, "two records for %s", r.ID)
		byID[r.ID] = r
	}
	codes := map[outcome.Code]int{}
	unknown := 0
	for i, ev := range events {
		r, ok := byID[ev.Key()]
		require.True(t, ok, "message %d has no record", i)
		require.Equal(t, inbound.StatusDone, r.Status, "message %d: %+v", i, r)
		require.True(t, r.Outcome.Code.Valid(), "message %d: no valid outcome: %+v", i, r.Outcome)
		codes[r.Outcome.Code]++
		if !answered[i] {
			require.Equal(t, gate.IgnoredProactiveOff, r.Outcome.Code, "message %d", i)
			continue
		}
		require.Equal(t, outcome.Replied, r.Outcome.Code, "message %d: %+v", i, r.Outcome)
		if strings.Contains(r.Outcome.Reason, "delivery_unknown") {
			unknown++
		}
	}

	pl.mu.Lock()
	defer pl.mu.Unlock()
	for key, n := range pl.sends {
		require.Equal(t, 1, n, "chunk %q delivered %d times", pl.texts[key], n)
	}
	missing := 0
	for i := range events {
		for _, c := range chunkTexts(i) {
			if !answered[i] {
				require.Zero(t, pl.byText[c], "chunk %q delivered for a message that is not answered", c)
				continue
			}
			require.LessOrEqual(t, pl.byText[c], 1, "chunk %q delivered %d times", c, pl.byText[c])
			if pl.byText[c] == 0 {
				// Only a chunk whose send a kill cut short, and whose
				// presence in the chat could not be settled, may be
				// missing, and its reply says so.
				missing++
				require.Contains(t, byID[events[i].Key()].Outcome.Reason, "(delivery_unknown)", "chunk %q is missing", c)
			}
		}
	}
	require.Empty(t, pl.overlaps, "two processes held the platform connection at once")
	kmu.Lock()
	defer kmu.Unlock()
	require.GreaterOrEqual(t, holderKills, 2, "the connection's holder was killed")
	t.Logf("%d messages in %s with %d kills (%d of the holder): %v", total, took.Round(time.Millisecond), len(killLog), holderKills, killLog)
	t.Logf("outcomes %v; %d chunks delivered, each once; %d chunks not delivered because a kill left their fate unknown (%d replies marked delivery_unknown); the connection changed hands %d times",
		codes, len(pl.sends), missing, unknown, len(pl.holds)-1)
}

// allRecords pages through every record.
func allRecords(ctx context.Context, db inbound.RecordReader) ([]inbound.Record, error) {
	var out []inbound.Record
	q := inbound.RecordQuery{Limit: inbound.MaxRecordPage}
	for {
		page, err := db.ListRecords(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Records...)
		if page.Next == "" {
			return out, nil
		}
		q.Before = page.Next
	}
}

// scaleChannel is a child's platform connection: it dials the parent
// when its Run is called (only the process holding the connection runs
// it) and dials again after the parent hangs up.
type scaleChannel struct {
	addr   string
	id     int
	lookup func(context.Context, string) (inbound.Record, error)

	mu  sync.Mutex
	cur *loopChannel
}

func (c *scaleChannel) Name() string { return "loop" }

func (c *scaleChannel) Run(ctx context.Context, sink channel.Sink) error {
	for ctx.Err() == nil {
		conn, err := net.Dial("tcp", c.addr)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		lc := newLoopChannel(conn, func() {})
		lc.lookup = c.lookup
		if lc.write(wireMsg{Type: "hello", Gen: c.id}) != nil {
			_ = conn.Close()
			continue
		}
		c.mu.Lock()
		c.cur = lc
		c.mu.Unlock()
		cctx, cancel := context.WithCancel(ctx)
		_ = lc.Run(cctx, sink)
		cancel()
		_ = conn.Close()
		c.mu.Lock()
		c.cur = nil
		c.mu.Unlock()
		sink.ReportState(ctx, channel.State{Platform: "loop", BotID: "bot", Reason: "platform hung up"})
	}
	return nil
}

func (c *scaleChannel) live() *loopChannel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

func (c *scaleChannel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	lc := c.live()
	if lc == nil {
		return channel.Receipt{}, channel.ErrOffline
	}
	return lc.Send(ctx, out)
}

func (c *scaleChannel) FetchHistory(ctx context.Context, q channel.HistoryQuery) (channel.HistoryPage, error) {
	lc := c.live()
	if lc == nil {
		return channel.HistoryPage{}, channel.ErrOffline
	}
	return lc.FetchHistory(ctx, q)
}

// TestScaleoutChild is a child process of TestScaleoutCrash.
func TestScaleoutChild(t *testing.T) {
	if os.Getenv(scaleChildEnv) == "" {
		t.Skip("only runs as a child of TestScaleoutCrash")
	}
	ctx, stop := signal.NotifyContext(t.Context(), syscall.SIGTERM)
	defer stop()
	id, err := strconv.Atoi(os.Getenv(crashGenEnv))
	require.NoError(t, err)
	ch := &scaleChannel{addr: os.Getenv(scaleAddrEnv), id: id}
	model := agenttest.New().KeepLast(16)
	model.Otherwise(agenttest.Func(func(ctx context.Context, req agent.Request) (*agent.Response, error) {
		switch req.Purpose {
		case agent.PurposeChat:
		case agent.PurposeAudit:
			return &agent.Response{Text: audit(false)}, nil
		case agent.PurposeClassify:
			return &agent.Response{Text: `{"label":"independent","confidence":0.99}`}, nil
		default:
			return &agent.Response{Text: "{}"}, nil
		}
		last := messageRE.FindString(req.Messages[len(req.Messages)-1].Content)
		select { // a model takes a moment
		case <-time.After(40 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &agent.Response{Text: "re " + last + "[persona-msg]part two of " + last + "[persona-msg]part three of " + last}, nil
	}))
	p, err := persona.New(persona.Options{
		Channels:    []channel.Channel{ch},
		DatabaseURL: os.Getenv(scaleURLEnv),
		DataDir:     os.Getenv(scaleDirEnv),
		Model:       model,
		NoPacing:    true,
		NoRouter:    true,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("child", id),
	})
	require.NoError(t, err)
	ch.lookup = p.Lookup
	require.NoError(t, p.Run(ctx))
	require.NoError(t, p.Close())
}

// Two pipelines on one PostgreSQL schema, as two processes of one bot
// would run: one holds the channel's connection, both run turns, the
// other's replies go out through the holder, and when the holder stops
// the other takes the connection over.
func TestTwoPipelinesShareOnePostgres(t *testing.T) {
	if os.Getenv(scaleChildEnv) != "" || os.Getenv(crashChildEnv) != "" {
		t.Skip("child process")
	}
	url := pgtest.Schema(t)
	type proc struct {
		ch     *chantest.Channel
		p      *persona.Pipeline
		turns  atomic.Int64
		cancel context.CancelFunc
		done   chan error
	}
	start := func() *proc {
		pr := &proc{ch: chantest.New(chantest.Config{BotID: "bot"}), done: make(chan error, 1)}
		model := agenttest.New().KeepLast(4)
		model.Otherwise(agenttest.Func(func(ctx context.Context, req agent.Request) (*agent.Response, error) {
			if req.Purpose != agent.PurposeChat {
				return &agent.Response{Text: audit(false)}, nil
			}
			pr.turns.Add(1)
			time.Sleep(30 * time.Millisecond)
			return &agent.Response{Text: "re " + messageRE.FindString(req.Messages[len(req.Messages)-1].Content)}, nil
		}))
		p, err := persona.New(persona.Options{Channels: []channel.Channel{pr.ch}, DatabaseURL: url, DataDir: t.TempDir(),
			Model: model, NoPacing: true, NoRouter: true, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		pr.p = p
		ctx, cancel := context.WithCancel(context.Background())
		pr.cancel = cancel
		go func() { pr.done <- p.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			<-pr.done
			_ = p.Close()
		})
		return pr
	}
	a, b := start(), start()
	holder := func() *proc {
		var h *proc
		require.Eventually(t, func() bool {
			switch {
			case a.ch.Running() && !b.ch.Running():
				h = a
			case b.ch.Running() && !a.ch.Running():
				h = b
			default:
				return false
			}
			return true
		}, 10*time.Second, 10*time.Millisecond, "exactly one pipeline holds the connection")
		return h
	}
	say := func(h *proc, from, to int) []string {
		var keys []string
		for i := from; i < to; i++ {
			u := fmt.Sprintf("u%d", i%20)
			ev, err := h.ch.Say(t.Context(), channel.Chat{Kind: channel.Private, ID: u}, channel.Sender{ID: u, Name: "User " + u},
				fmt.Sprintf("message %d", i), func(ev *channel.Event) { ev.MessageID = fmt.Sprintf("m%d", i) })
			require.NoError(t, err)
			keys = append(keys, ev.Key())
		}
		return keys
	}
	replied := func(keys []string) {
		require.Eventually(t, func() bool {
			for _, k := range keys {
				r, err := a.p.Lookup(t.Context(), k)
				if err != nil || r.Status != inbound.StatusDone {
					return false
				}
			}
			return true
		}, 60*time.Second, 20*time.Millisecond)
		for _, k := range keys {
			r, err := a.p.Lookup(t.Context(), k)
			require.NoError(t, err)
			require.Equal(t, outcome.Replied, r.Outcome.Code, "%s: %+v", k, r.Outcome)
		}
	}
	sentTexts := func() map[string]int {
		n := map[string]int{}
		for _, pr := range []*proc{a, b} {
			for _, s := range pr.ch.Sent() {
				n[s.Out.Text]++
			}
		}
		return n
	}

	h := holder()
	keys := say(h, 0, 60)
	replied(keys)
	require.Positive(t, a.turns.Load(), "the first pipeline ran turns")
	require.Positive(t, b.turns.Load(), "the second pipeline ran turns")
	other := a
	if h == a {
		other = b
	}
	require.Empty(t, other.ch.Sent(), "only the holder's connection sends")

	// The holder stops: the other takes the connection over and answers.
	h.cancel()
	require.NoError(t, <-h.done)
	h.done <- nil // for the cleanup
	require.Eventually(t, other.ch.Running, 10*time.Second, 10*time.Millisecond, "the other pipeline took the connection over")
	more := say(other, 60, 80)
	require.Eventually(t, func() bool {
		for _, k := range more {
			r, err := other.p.Lookup(t.Context(), k)
			if err != nil || r.Status != inbound.StatusDone {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond)
	for _, k := range more {
		r, err := other.p.Lookup(t.Context(), k)
		require.NoError(t, err)
		require.Equal(t, outcome.Replied, r.Outcome.Code, "%s: %+v", k, r.Outcome)
	}
	texts := sentTexts()
	for i := range 80 {
		require.Equal(t, 1, texts[fmt.Sprintf("re message %d", i)], "message %d answered once", i)
	}
	require.Len(t, texts, 80)
}
