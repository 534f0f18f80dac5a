package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errNewChannel ends a listener session so that the next one listens to
// a channel that gained its first subscriber.
var errNewChannel = errors.New("postgres: listener: a new channel to listen to")

// Notifications: a store sends NOTIFY on a topic ("queue", ...) in the
// transaction that makes something happen, and every process's listener
// calls the topic's subscribers when it arrives. The channel name
// includes the schema, so stores in different schemas of one database do
// not wake each other. A notification is a hint, never the only record:
// after the listener (re)connects it calls every subscriber once, since
// notifications sent while it was away are lost.

// channelName returns the NOTIFY channel of topic in this store's schema.
func (d *DB) channelName(topic string) string {
	return "persona." + d.schema + "." + topic
}

// notify queues a notification on topic; PostgreSQL delivers it when q's
// transaction commits (at once outside a transaction).
func (d *DB) notify(ctx context.Context, q execer, topic, payload string) error {
	_, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, d.channelName(topic), payload)
	return err
}

// Subscribe calls fn with the payload of every notification on topic,
// from any process sharing the store, until the returned function is
// called; and with an empty payload after the listener reconnected. fn
// runs on the listener's goroutine and must not block.
func (d *DB) Subscribe(topic string, fn func(payload string)) (cancel func()) {
	return d.lis.subscribe(d.channelName(topic), fn)
}

// execer is what pgx.Tx, *pgxpool.Pool and *pgx.Conn have in common for
// statements without rows.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

type subscription struct{ fn func(string) }

// listener holds one connection of its own that LISTENs to the channels
// that have subscribers.
type listener struct {
	d *DB

	mu      sync.Mutex
	subs    map[string][]*subscription
	changed chan struct{} // a channel gained its first subscriber

	cancel context.CancelFunc
	done   chan struct{}
}

func newListener(d *DB) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{d: d, subs: map[string][]*subscription{}, changed: make(chan struct{}, 1),
		cancel: cancel, done: make(chan struct{})}
	go l.run(ctx)
	return l
}

func (l *listener) stop() {
	l.cancel()
	<-l.done
}

func (l *listener) subscribe(channel string, fn func(string)) func() {
	s := &subscription{fn: fn}
	l.mu.Lock()
	first := len(l.subs[channel]) == 0
	l.subs[channel] = append(l.subs[channel], s)
	l.mu.Unlock()
	if first {
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		list := l.subs[channel]
		for i, x := range list {
			if x == s {
				l.subs[channel] = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(l.subs[channel]) == 0 {
			delete(l.subs, channel)
		}
	}
}

// deliver calls the subscribers of channel (all channels when channel is
// "").
func (l *listener) deliver(channel, payload string) {
	l.mu.Lock()
	var fns []func(string)
	for name, list := range l.subs {
		if channel == "" || name == channel {
			for _, s := range list {
				fns = append(fns, s.fn)
			}
		}
	}
	l.mu.Unlock()
	for _, fn := range fns {
		fn(payload)
	}
}

func (l *listener) channels() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.subs))
	for name := range l.subs {
		out = append(out, name)
	}
	return out
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNewChannel) {
			backoff = 100 * time.Millisecond
			continue
		}
		l.d.log.Warn("postgres: notification listener lost its connection; reconnecting", "err", redact(err), "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// session connects, listens and dispatches until the connection fails or
// ctx ends.
func (l *listener) session(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.d.cfg.ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}()
	listening := map[string]bool{}
	sync := func() error {
		for _, ch := range l.channels() {
			if !listening[ch] {
				if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
					return err
				}
				listening[ch] = true
			}
		}
		return nil
	}
	if err := sync(); err != nil {
		return err
	}
	// Whatever was notified while no connection listened is lost: wake
	// everyone once.
	l.deliver("", "")
	for {
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-l.changed:
				cancel()
			case <-wctx.Done():
			}
		}()
		n, err := conn.WaitForNotification(wctx)
		woken := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			l.deliver(n.Channel, n.Payload)
		case woken:
			// A new channel to listen to. pgx closes a connection whose
			// wait was cancelled, so listen again on a new one (which
			// wakes every subscriber once: harmless).
			if !conn.IsClosed() {
				if err := sync(); err == nil {
					continue
				}
			}
			return errNewChannel
		default:
			return err
		}
	}
}
