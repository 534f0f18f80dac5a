// Package logbuf is a goroutine-safe buffer for capturing log output (a
// slog JSON handler, a bot's stdout) and reading it back while writers are
// still running. The tests of several packages and the reference bots use
// it.
package logbuf
