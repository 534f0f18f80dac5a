package persona_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/internal/cputime"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/store"
	"github.com/personakit/persona/store/postgres"
)

// benchPipeline pushes b.N messages through a full pipeline (chantest
// channel, zero-latency scripted model, SQLite store in a temp dir) from
// four feeding goroutines (a few busy channel connections) and from 32 (many
// connections, or an adapter that hands events over concurrently), and
// reports throughput, CPU per message, the store writer's busy time and
// transactions per message, and the added latency from HandleEvent to the
// terminal record.
func benchPipeline(b *testing.B, mk func(i int) (channel.Chat, channel.Sender, []chantest.SayOption)) {
	for _, feeders := range []int{4, 32} {
		b.Run(fmt.Sprintf("feeders-%d", feeders), func(b *testing.B) {
			benchPipelineAt(b, 0, feeders, mk)
		})
	}
}

// benchPipelineAt feeds at most rate messages per second (0 = as fast as
// the feeders can), so the latency of a pipeline that keeps up can be told
// from the queueing delay of a saturating burst.
func benchPipelineAt(b *testing.B, rate, feeders int, mk func(i int) (channel.Chat, channel.Sender, []chantest.SayOption),
	setup ...func(*persona.Options)) {
	model := agenttest.New()
	// The model records no requests: the benchmark reads none.
	model.Otherwise(agenttest.Reply("sure thing")).KeepLast(-1)
	// The channel keeps no record of the messages either (the benchmark
	// reads none; kept, they grew the heap by ≈ 2.5 KB per message).
	ch := chantest.New(chantest.Config{Discard: true})
	var mu sync.Mutex
	start := make(map[string]time.Time, b.N)
	lat := make([]time.Duration, 0, b.N)
	all := make(chan struct{})
	dir := b.TempDir()
	// The store as the pipeline would open it (no memory: history search
	// deferred), opened here so that its writer can be observed.
	db, err := store.Open(filepath.Join(dir, "persona.db"), store.Options{DeferSearch: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	opt := persona.Options{
		// Bare: no history capability, so no reconnect backfill walks the
		// chats during the measurement.
		Channels: []channel.Channel{ch.Bare()}, DataDir: dir, DB: db, Model: model, NoPacing: true, NoRouter: true,
		Logger: slog.New(slog.DiscardHandler), // the default logger writes every connection line
		OnOutcome: func(id string, _ inbound.Outcome) {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if t0, ok := start[id]; ok {
				lat = append(lat, now.Sub(t0))
				if len(lat) == b.N {
					close(all)
				}
			}
		},
	}
	for _, f := range setup {
		f(&opt)
	}
	p, err := persona.New(opt)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	b.ReportAllocs()
	b.ResetTimer()
	w0 := db.WriterStats()
	cpu0 := cputime.Process()
	t0 := time.Now()
	var tick *time.Ticker
	if rate > 0 {
		feeders, tick = 1, time.NewTicker(time.Second/time.Duration(rate))
		defer tick.Stop()
	}
	var wg sync.WaitGroup
	for f := range feeders {
		wg.Go(func() {
			for i := f; i < b.N; i += feeders {
				if tick != nil {
					<-tick.C
				}
				chat, from, opts := mk(i)
				ev := channel.Event{Platform: ch.Name(), BotID: "bot", Kind: channel.KindMessage, Chat: chat,
					MessageID: fmt.Sprintf("m%d", i), Time: time.Now(), Sender: from,
					Segments: []channel.Segment{channel.Text(fmt.Sprintf("message number %d", i))}}
				for _, o := range opts {
					o(&ev)
				}
				mu.Lock()
				start[ev.Key()] = time.Now()
				mu.Unlock()
				if err := ch.Inject(ctx, ev); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	<-all
	elapsed := time.Since(t0)
	cpu := cputime.Process() - cpu0
	w := db.WriterStats()
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/msg")
	if opt.DB == persona.Storage(db) { // the SQLite writer's figures
		b.ReportMetric(float64((w.Busy-w0.Busy).Microseconds())/float64(b.N), "writer-µs/msg")
		b.ReportMetric(float64(w.Batches-w0.Batches)/float64(b.N), "commits/msg")
	}
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkPipelineReplied: private messages, each answered with one chunk.
func BenchmarkPipelineReplied(b *testing.B) {
	benchPipeline(b, func(i int) (channel.Chat, channel.Sender, []chantest.SayOption) {
		u := fmt.Sprintf("u%d", i%256)
		return channel.Chat{Kind: channel.Private, ID: u}, channel.Sender{ID: u, Name: "User " + u}, nil
	})
}

// BenchmarkPipelineIgnored: unprompted group chatter, ended by the gates.
func BenchmarkPipelineIgnored(b *testing.B) {
	benchPipeline(b, func(i int) (channel.Chat, channel.Sender, []chantest.SayOption) {
		u := fmt.Sprintf("u%d", i%97)
		return channel.Chat{Kind: channel.Group, ID: fmt.Sprintf("g%d", i%64)}, channel.Sender{ID: u, Name: "User " + u}, nil
	})
}

// BenchmarkPipelineRepliedLatency: private messages at 100/s, a load the
// pipeline keeps up with, so p50/p99 are the latency the pipeline adds.
func BenchmarkPipelineRepliedLatency(b *testing.B) {
	benchPipelineAt(b, 100, 1, func(i int) (channel.Chat, channel.Sender, []chantest.SayOption) {
		u := fmt.Sprintf("u%d", i%256)
		return channel.Chat{Kind: channel.Private, ID: u}, channel.Sender{ID: u, Name: "User " + u}, nil
	})
}

// BenchmarkPipelineStoreLatency: private messages at 100/s through one
// pipeline on each store: SQLite (the default) and PostgreSQL (a fresh
// schema on the server of PERSONA_TEST_DATABASE_URL; the channel is
// wrapped for sharing, and this process holds it). The difference in p50
// and p99 is what keeping the state in PostgreSQL adds to a turn.
func BenchmarkPipelineStoreLatency(b *testing.B) {
	mk := func(i int) (channel.Chat, channel.Sender, []chantest.SayOption) {
		u := fmt.Sprintf("u%d", i%256)
		return channel.Chat{Kind: channel.Private, ID: u}, channel.Sender{ID: u, Name: "User " + u}, nil
	}
	b.Run("sqlite", func(b *testing.B) { benchPipelineAt(b, 100, 1, mk) })
	b.Run("postgres", func(b *testing.B) {
		pg, err := postgres.Open(context.Background(), pgtest.Schema(b), postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer pg.Close()
		benchPipelineAt(b, 100, 1, mk, func(o *persona.Options) { o.DB = pg })
	})
}

// BenchmarkPipelineIgnoredLatency: unprompted group chatter at 200/s.
func BenchmarkPipelineIgnoredLatency(b *testing.B) {
	benchPipelineAt(b, 200, 1, func(i int) (channel.Chat, channel.Sender, []chantest.SayOption) {
		u := fmt.Sprintf("u%d", i%97)
		return channel.Chat{Kind: channel.Group, ID: fmt.Sprintf("g%d", i%64)}, channel.Sender{ID: u, Name: "User " + u}, nil
	})
}

// BenchmarkPipelineImageLatency: private messages at 100/s from 16 chats,
// answered by a model that takes pictures, without a picture, with a small
// one (a one-colour 64×64 PNG, 0.2 KiB) and with a photo-sized one (256×256
// of noise, 256 KiB).
// Each chat sends the same picture, so all but its first message find it
// in the media cache: the difference is what a cached picture adds to a
// turn (the cache lookups, reading the bytes, a data URL in the request,
// the description from the cache and storing it with the message).
func BenchmarkPipelineImageLatency(b *testing.B) {
	for _, c := range []struct {
		name string
		pic  []byte
	}{{"text-only", nil}, {"cached-image-small", benchPNG(b, 64, false)}, {"cached-image-photo", benchPNG(b, 256, true)}} {
		b.Run(c.name, func(b *testing.B) {
			benchPipelineAt(b, 100, 1, func(i int) (channel.Chat, channel.Sender, []chantest.SayOption) {
				u := fmt.Sprintf("u%d", i%16)
				var opts []chantest.SayOption
				if c.pic != nil {
					opts = append(opts, func(ev *channel.Event) {
						ev.Segments = append(ev.Segments, channel.Image(channel.Media{FileID: "cat.png"}))
					})
				}
				return channel.Chat{Kind: channel.Private, ID: u}, channel.Sender{ID: u, Name: "User " + u}, opts
			}, func(o *persona.Options) {
				o.Channels = []channel.Channel{fetching{Channel: o.Channels[0], data: c.pic}}
				o.Model = seeing{o.Model}
			})
		})
	}
}

// fetching adds channel.MediaFetcher to a channel: every file is data.
type fetching struct {
	channel.Channel
	data []byte
}

func (f fetching) Unwrap() channel.Channel { return f.Channel }

func (f fetching) FetchMedia(context.Context, channel.Chat, channel.Media, channel.MediaRequest) (channel.MediaContent, error) {
	return channel.MediaContent{Body: io.NopCloser(bytes.NewReader(f.data)), Size: int64(len(f.data))}, nil
}

// seeing declares a model able to take pictures.
type seeing struct{ agent.Model }

func (seeing) AcceptsImages() bool { return true }

// benchPNG is a side×side PNG: one colour (a few hundred bytes), or noise
// (about 4 bytes a pixel, the size of a photo of that many pixels).
func benchPNG(b *testing.B, side int, noise bool) []byte {
	img := image.NewRGBA(image.Rect(0, 0, side, side))
	if noise {
		r := rand.New(rand.NewPCG(1, 2))
		for i := range img.Pix {
			img.Pix[i] = byte(r.Uint32())
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}
