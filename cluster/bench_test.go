package cluster_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/cluster"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/store/postgres"
)

// BenchmarkRelaySend: one chunk sent by the process that holds the
// connection (direct: the wrapped channel's Send) and by a process that
// does not (relayed: a row in the relay table, the holder woken by a
// notification, sending it and storing the receipt, the sender woken by a
// notification), one at a time and eight at once. The fake platform
// answers at once, so the figures are what sharing the connection adds to
// a send.
func BenchmarkRelaySend(b *testing.B) {
	url := pgtest.Schema(b)
	pl := newPlatform()
	open := func() *postgres.DB {
		db, err := postgres.Open(context.Background(), url, postgres.Options{Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	run := func(id string) channel.Channel {
		db := open()
		sh := cluster.Share(newTestChannel(id, pl), db, cluster.Options{Name: "bench/test#0", Logger: quiet()})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = sh.Run(ctx, &stateSink{}) }()
		b.Cleanup(func() { cancel(); <-done })
		return sh
	}
	holder := run("a")
	deadline := time.Now().Add(10 * time.Second)
	for pl.holder() != "a" {
		if time.Now().After(deadline) {
			b.Fatal("the first process did not take the connection")
		}
		time.Sleep(5 * time.Millisecond)
	}
	follower := run("b")
	var seq atomic.Int64
	send := func(b *testing.B, via channel.Channel) {
		n := seq.Add(1)
		out := channel.Outgoing{Chat: chat, Text: fmt.Sprintf("chunk %d", n), IdempotencyKey: fmt.Sprintf("k%d", n)}
		for try := 0; ; try++ {
			_, err := via.Send(context.Background(), out)
			if err == nil {
				return
			}
			if try == 200 { // the follower may not have seen the holder online yet
				b.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	send(b, follower) // the follower sees the holder online
	for _, c := range []struct {
		name string
		via  channel.Channel
	}{{"direct", holder}, {"relayed", follower}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				send(b, c.via)
			}
		})
		b.Run(c.name+"-8-at-once", func(b *testing.B) {
			b.SetParallelism(4) // 2 cores × 4 = 8 senders
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					send(b, c.via)
				}
			})
		})
	}
}
