package postgres

import (
	"encoding/json"
	"fmt"

	"github.com/personakit/persona/channel"
)

// encodeEvent is the stored form of an event (message_events.payload).
func encodeEvent(ev *channel.Event) (string, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return "", fmt.Errorf("postgres: encode event: %w", err)
	}
	return string(b), nil
}

// decodeEvent reads a stored event.
func decodeEvent(payload string) (channel.Event, error) {
	var ev channel.Event
	if err := json.Unmarshal([]byte(payload), &ev); err != nil {
		return channel.Event{}, fmt.Errorf("postgres: decode stored event: %w", err)
	}
	return ev, nil
}
