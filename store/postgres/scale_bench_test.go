package postgres_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store"
	"github.com/personakit/persona/store/postgres"
)

// The queue scale-out benchmark: b.N messages enqueued by four feeders,
// claimed and completed by eight workers per process (the pipeline's
// default), with one, two and four processes on one PostgreSQL database
// (child processes: this test binary re-executed as TestQueueBenchChild),
// and the SQLite store (one process: it owns its file) in the same run.
// A message is enqueued, claimed, and completed with its outcome: the
// queue's whole part of a turn.

const (
	qbenchChildEnv = "PERSONA_QBENCH_CHILD"
	qbenchURLEnv   = "PERSONA_QBENCH_URL"
)

// benchEvent is message i of the benchmark, in one of 256 chats.
func benchEvent(i int) inbound.Item {
	u := fmt.Sprintf("u%d", i%256)
	ev := channel.Event{Platform: "bench", BotID: "bot", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: channel.Private, ID: u}, MessageID: fmt.Sprintf("m%d", i), Time: time.Now(),
		Sender: channel.Sender{ID: u, Name: "User " + u}, Segments: []channel.Segment{channel.Text(fmt.Sprintf("message number %d", i))}}
	return inbound.Item{Event: ev, Priority: inbound.PriorityDirect,
		SessionKey: channel.SessionKey("default", ev.Platform, ev.BotID, ev.Chat)}
}

// consume claims and completes items with eight workers until ctx ends.
// wake, when set, wakes the idle workers (the queue's OnClaimable).
func consume(ctx context.Context, q inbound.Queue, owner string, wake <-chan struct{}) {
	const workers = 8
	for ctx.Err() == nil {
		ls, err := q.Claim(ctx, inbound.Limits{Max: workers, Owner: owner})
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "claim:", err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		if len(ls) == 0 {
			select {
			case <-ctx.Done():
			case <-wake:
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		var wg sync.WaitGroup
		for _, l := range ls {
			wg.Go(func() {
				o := inbound.Outcome{Code: outcome.Replied, Stage: inbound.StageEchoPersisted, Kind: "chat"}
				if err := q.Complete(ctx, l, o); err != nil && ctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "complete:", err)
				}
			})
		}
		wg.Wait()
	}
}

// wakeChan turns a queue's OnClaimable calls into a channel.
func wakeChan(q inbound.Queue) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w, ok := q.(inbound.Waker)
	if !ok {
		return ch, func() {}
	}
	stop := w.OnClaimable(func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	return ch, stop
}

// TestQueueBenchChild is a consumer process of BenchmarkQueueScaleout.
func TestQueueBenchChild(t *testing.T) {
	url := os.Getenv(qbenchURLEnv)
	if os.Getenv(qbenchChildEnv) == "" || url == "" {
		t.Skip("only runs as a child of BenchmarkQueueScaleout")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	go func() { // the parent closes stdin to stop the child
		_, _ = os.Stdin.Read(make([]byte, 1))
		cancel()
	}()
	wake, stop := wakeChan(db)
	defer stop()
	consume(ctx, db, "child-"+strconv.Itoa(os.Getpid()), wake)
}

func BenchmarkQueueScaleout(b *testing.B) {
	b.Run("sqlite-1", func(b *testing.B) {
		db, err := store.Open(filepath.Join(b.TempDir(), "persona.db"), store.Options{DeferSearch: true})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		wake := make(chan struct{}, 1)
		go func() { defer close(done); consume(ctx, db, "in-process", wake) }()
		benchQueue(b, db, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		cancel()
		<-done
	})
	for _, procs := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("postgres-%d", procs), func(b *testing.B) {
			url := pgtest.Schema(b)
			db, err := postgres.Open(context.Background(), url, postgres.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			for range procs {
				cmd := exec.Command(os.Args[0], "-test.run=^TestQueueBenchChild$")
				cmd.Env = append(os.Environ(), qbenchChildEnv+"=1", qbenchURLEnv+"="+url)
				cmd.Stderr = os.Stderr
				in, err := cmd.StdinPipe()
				if err != nil {
					b.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				defer func() { _ = in.Close(); _ = cmd.Wait() }()
			}
			benchQueue(b, db, func() {})
		})
	}
}

// benchQueue enqueues b.N messages from four feeders and waits until
// every one is done; it reports messages per second and the median time
// from enqueue to done.
func benchQueue(b *testing.B, q interface {
	inbound.Queue
	inbound.RecordReader
}, kick func()) {
	ctx := context.Background()
	base := int(time.Now().UnixNano() % 1e9)
	b.ResetTimer()
	t0 := time.Now()
	var wg sync.WaitGroup
	for f := range 4 {
		wg.Go(func() {
			for i := f; i < b.N; i += 4 {
				if _, err := q.Enqueue(ctx, benchEvent(base+i)); err != nil {
					panic(err) // the wait below would never end
				}
				kick()
			}
		})
	}
	wg.Wait()
	for {
		s, err := q.Summarize(ctx, t0.Add(-time.Hour), time.Now().Add(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		if s.Outcomes[outcome.Replied] >= b.N {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}
