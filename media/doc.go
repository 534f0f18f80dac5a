// Package media fetches, caches, describes and transcribes the media of
// chat messages (images, stickers, voice clips, videos, files).
//
// # Overview
//
// A platform media reference ([channel.Media] in a [channel.Segment]) goes
// through [Service.Fetch]: the channel's [channel.MediaFetcher] (or the
// reference's own http(s) URL) gives the bytes, which are streamed into a
// [Cache] while being hashed, capped in size and sniffed for their real
// type. The cache is content-addressed (SHA-256) and remembers which
// reference was which blob, so a reference is downloaded once.
//
// Texts derived from content are notes on its blob, named with the version
// of what made them: [Service.Describe] asks the vision model once per
// picture ([NoteDescription], [NoteSticker]) and [Service.Transcribe] the
// speech-to-text model once per voice clip ([NoteTranscript]). The same
// picture posted in two chats is described once.
//
// [Cache.Cleanup] (every hour under [Cache.Run]) removes blobs not used for
// the TTL and then the least recently used ones beyond the total cap, with
// their refs and notes. Errors say with [Definitive] whether a retry can
// help.
//
// # Concurrency
//
// [Cache] and [Service] are safe for concurrent use. Concurrent Fetches of
// one reference share one download, and concurrent Describe or Transcribe
// calls for one blob share one model call; each caller still stops waiting
// when its own context ends. Fetch, Describe and Transcribe block: run them
// on a turn's worker, not on a channel's goroutine. One Cache at a time
// may use a cache directory.
//
// # Safety
//
// Every URL, including one a channel hands back and every redirect, is
// fetched through an address guard that refuses private, loopback and
// link-local addresses (Config.Allow opens prefixes for tests). A fetch is
// bounded by Config.Timeout and by the size cap of its kind; the cap is
// enforced while reading, so an oversized body is never read past it.
// Content is typed by its bytes, not by what the platform or server
// declares, so an "image" that is HTML is refused. Error texts leave out
// URLs, which may carry tokens. Cache files are private to the user
// (0o700 directories, 0o600 files) and written by rename, so a crash never
// leaves a half-written file in place.
package media
