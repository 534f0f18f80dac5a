package onebot

import "github.com/personakit/persona/channel"

// BackoffDelay exposes the backoff schedule to the external tests.
var BackoffDelay = backoffDelay

// ToSegments exposes the segment conversion to the external tests.
func ToSegments(m Message, selfID string) []channel.Segment {
	segs, _ := toSegments(m, selfID)
	return segs
}
