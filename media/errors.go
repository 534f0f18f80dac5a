package media

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/internal/netguard"
)

// The package's errors. Test them with errors.Is; Definitive says which
// ones a retry cannot cure.
var (
	// ErrTooLarge: the content is larger than the cap of its kind. A
	// channel's channel.ErrMediaTooLarge is returned wrapped in it.
	ErrTooLarge = errors.New("media: larger than the cap")
	// ErrUnsupported: the content is not of a type the call accepts (an
	// "image" whose bytes are HTML, a voice clip the platform left in
	// SILK).
	ErrUnsupported = errors.New("media: unsupported content type")
	// ErrNoSource: the reference has no http(s) URL and the channel cannot
	// fetch media.
	ErrNoSource = errors.New("media: the reference has no URL and the channel cannot fetch media")
	// ErrNoVision: Describe was called on a Service without a vision model.
	ErrNoVision = errors.New("media: no vision model configured")
	// ErrNoTranscriber: Transcribe was called on a Service without a
	// transcriber.
	ErrNoTranscriber = errors.New("media: no transcriber configured")
)

// HTTPError is a download that got a non-2xx HTTP status.
type HTTPError struct {
	Status int
}

// Error names the status.
func (e *HTTPError) Error() string {
	return fmt.Sprintf("media: HTTP %d %s", e.Status, http.StatusText(e.Status))
}

// Definitive reports whether retrying the call that returned err cannot
// help: content too large or of the wrong type, no way to fetch it, an
// address the guard refuses, media the platform no longer has, an HTTP 4xx
// other than 408 and 429, a host name that does not exist, a missing
// vision model or transcriber, and model errors that agent.Transient calls
// permanent. Timeouts, context errors,
// network errors, 5xx and transient model errors are not definitive; nil
// is not either.
func Definitive(err error) bool {
	if err == nil {
		return false
	}
	var me *agent.Error
	if errors.As(err, &me) {
		return !agent.Transient(err)
	}
	for _, target := range []error{
		ErrTooLarge, ErrUnsupported, ErrNoSource, ErrNoVision, ErrNoTranscriber,
		channel.ErrMediaTooLarge, channel.ErrMediaUnavailable, netguard.ErrBlocked,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status >= 400 && he.Status < 500 &&
			he.Status != http.StatusRequestTimeout && he.Status != http.StatusTooManyRequests
	}
	// A host name that does not exist will not start to.
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}
