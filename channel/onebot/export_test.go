package onebot

// BackoffDelay exposes the backoff schedule to the external tests.
var BackoffDelay = backoffDelay
