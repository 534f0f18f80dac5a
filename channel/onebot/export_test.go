package onebot

import "github.com/personakit/persona/channel"

// BackoffDelay exposes the backoff schedule to the external tests.
var BackoffDelay = backoffDelay

// ToSegments exposes the segment conversion to the external tests.
func ToSegments(m Message, selfID string) []channel.Segment {
	segs, _ := toSegments(m, selfID)
	return segs
}

// DecodeEvent exposes the event decoder to the external tests: it turns a
// pushed payload into an event, or says why it produces none.
func (c *Channel) DecodeEvent(raw []byte) (channel.Event, error) {
	return c.decodeEvent(raw, channel.SourceLive)
}

// Event decoding errors, for the external tests.
var (
	ErrIgnored        = errIgnored
	ErrMalformed      = errMalformed
	ErrInvalidID      = errInvalidID
	ErrInvalidRequest = errInvalidRequest
)
