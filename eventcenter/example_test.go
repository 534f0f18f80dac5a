package eventcenter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/eventcenter"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store"
)

// ExampleNew mounts the event center on an HTTP server at /events/ and
// reads a message through its API.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "eventcenter-example")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	db, err := store.Open(filepath.Join(dir, "persona.db"), store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = db.Close() }()

	center, err := eventcenter.New(eventcenter.Config{
		Records: db,                             // the event log
		Ledger:  db,                             // delivery slots in the trail
		Token:   "a-long-random-operator-token", // at least 16 characters
		Secrets: []string{"sk-example"},         // masked wherever they appear
	})
	if err != nil {
		log.Fatal(err)
	}
	defer center.Close()
	mux := http.NewServeMux()
	mux.Handle("/events/", http.StripPrefix("/events", center))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	// A real server also calls srv.Config.RegisterOnShutdown(center.Close),
	// and the pipeline calls center.Wake() when it records an outcome.

	ev := channel.Event{Platform: "demo", BotID: "bot", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: channel.Group, ID: "42"}, MessageID: "1", Time: time.Now(),
		Sender: channel.Sender{ID: "alice"}, Segments: []channel.Segment{channel.Text("hi, my key is sk-example")}}
	ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
	if _, err := db.Record(context.Background(), inbound.Item{Event: ev}, inbound.Outcome{Code: outcome.Replied}); err != nil {
		log.Fatal(err)
	}

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/events/api/messages?code=replied", nil)
	req.Header.Set("Authorization", "Bearer a-long-random-operator-token")
	resp, err := srv.Client().Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var page eventcenter.MessagePage
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		log.Fatal(err)
	}
	m := page.Messages[0]
	fmt.Println(resp.StatusCode, m.Chat, m.Sender, m.Code, m.Family)
	fmt.Println(m.Text)
	// Output:
	// 200 group:42 alice replied replied
	// hi, my key is ***
}
