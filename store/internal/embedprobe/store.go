//go:build !persona_nostore

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store"
)

// useStore opens the store at path and puts it to work as the pipeline
// would: enqueues messages, claims and completes them, and reads a chat's
// history and search. The store stays open until the returned function
// closes it.
func useStore(ctx context.Context, path string) (func() error, error) {
	db, err := store.Open(path, store.Options{})
	if err != nil {
		return nil, err
	}
	if err := work(ctx, db); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db.Close, nil
}

func work(ctx context.Context, db *store.DB) error {
	base := time.Now().Add(-time.Hour)
	var session string
	for i := range 200 {
		ev := channel.Event{Platform: "probe", BotID: "bot", Kind: channel.KindMessage,
			Chat:      channel.Chat{Kind: channel.Group, ID: fmt.Sprint("g", i%4)},
			MessageID: fmt.Sprint(i), Time: base.Add(time.Duration(i) * time.Second),
			Sender:   channel.Sender{ID: fmt.Sprint("u", i%7)},
			Segments: []channel.Segment{channel.Text(fmt.Sprint("message number ", i, " about the weather"))},
			Source:   channel.SourceLive}
		ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
		session = ev.SessionKey
		if _, err := db.Enqueue(ctx, inbound.Item{Event: ev, Priority: []int{0, 100}[i%2]}); err != nil {
			return err
		}
	}
	for {
		ls, err := db.Claim(ctx, inbound.Limits{Max: 32, PerGroup: 32, Owner: "probe", HoldBelow: inbound.PriorityDirect})
		if err != nil {
			return err
		}
		if len(ls) == 0 {
			break
		}
		for _, l := range ls {
			if err := db.Complete(ctx, l, inbound.Outcome{Code: outcome.Replied}); err != nil {
				return err
			}
		}
	}
	if _, err := db.Recent(ctx, session, 50); err != nil {
		return err
	}
	_, err := db.SearchHistory(ctx, memory.HistoryQuery{Sessions: []string{session}, Tokens: []string{"weather"}, Limit: 5})
	return err
}
