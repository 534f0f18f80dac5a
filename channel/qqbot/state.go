package qqbot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/personakit/persona/channel"
)

// Bounds of the reply ledger kept in the state.
const (
	maxRefsPerChat = 16
	maxRefs        = 4096
	maxKeysPerRef  = 64
	maxStateBytes  = 16 << 20
)

// route is where a chat's messages are sent.
type route string

// The routes (OpenAPI endpoints).
const (
	routeGroup   route = "group"   // POST /v2/groups/{group_openid}/messages
	routeC2C     route = "c2c"     // POST /v2/users/{openid}/messages
	routeChannel route = "channel" // POST /channels/{channel_id}/messages
	routeDM      route = "dm"      // POST /dms/{guild_id}/messages
)

// v2 reports whether the route is a v2 (group or C2C) endpoint, which
// takes msg_seq and limits the replies per inbound message.
func (r route) v2() bool { return r == routeGroup || r == routeC2C }

// inboundRef is one inbound message the bot may reply to (passively), with
// the msg_seq values given out for it.
type inboundRef struct {
	// ID is the platform message id (the msg_id of a reply).
	ID   string       `json:"id"`
	Chat channel.Chat `json:"chat"`
	// Route and Target say where replies go: Target is the group or user
	// openid, the channel id, or the direct-message guild id.
	Route  route  `json:"route"`
	Target string `json:"target"`
	// At is when the message was sent (the reply window starts there).
	At time.Time `json:"at"`
	// Next is the last msg_seq given out for this message.
	Next int `json:"next,omitempty"`
	// Keys maps an outgoing chunk's idempotency key to its msg_seq, so a
	// retried chunk is sent with the same msg_seq and the platform drops
	// it if it already has it.
	Keys map[string]int `json:"keys,omitempty"`
	// Retry marks the keys whose send failed in a way the pipeline
	// retries (the call was answered with a transient error, or not at
	// all, while its context was alive): only those are sent again with
	// their msg_seq. A key without it was cut off mid-call (the delivery
	// ledger never sends such a chunk again) and names a new chunk next
	// time.
	Retry map[string]bool `json:"retry,omitempty"`
	// Sent maps an idempotency key to the platform id of the delivered
	// message.
	Sent map[string]string `json:"sent,omitempty"`
}

// state is what survives a restart (Config.StateDir): the gateway session
// and the reply ledger.
type state struct {
	// SessionID and Seq resume the gateway session; Seq is the last
	// dispatch the sink accepted (or that needed no delivery).
	SessionID string        `json:"session_id,omitempty"`
	Seq       int64         `json:"seq,omitempty"`
	Inbound   []*inboundRef `json:"inbound,omitempty"`
}

// stateFile keeps the state in "qq-<appid>.state.json" in a directory,
// replaced atomically (temporary file, fsync, rename, fsync of the
// directory) on every save.
type stateFile struct {
	dir  string
	name string
}

func newStateFile(dir, appID string) (*stateFile, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("qqbot: state directory: %w", err)
	}
	return &stateFile{dir: dir, name: "qq-" + appID + ".state.json"}, nil
}

func (f *stateFile) path() string { return filepath.Join(f.dir, f.name) }

// load reads the state; a missing file is the zero state.
func (f *stateFile) load() (state, error) {
	data, err := os.ReadFile(f.path())
	if errors.Is(err, fs.ErrNotExist) {
		return state{}, nil
	}
	if err != nil {
		return state{}, fmt.Errorf("qqbot: state: %w", err)
	}
	return decodeState(data)
}

// decodeState parses a state file, dropping entries that are not usable.
func decodeState(data []byte) (state, error) {
	if len(data) > maxStateBytes {
		return state{}, fmt.Errorf("qqbot: state: %d bytes, at most %d", len(data), maxStateBytes)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return state{}, fmt.Errorf("qqbot: state is corrupt: %w", err)
	}
	if st.Seq < 0 {
		st.Seq = 0
	}
	refs := st.Inbound[:0]
	for _, r := range st.Inbound {
		if r == nil || r.ID == "" || r.Target == "" || !r.Chat.Kind.Valid() || r.Chat.ID == "" || r.At.IsZero() || r.Next < 0 {
			continue
		}
		switch r.Route {
		case routeGroup, routeC2C, routeChannel, routeDM:
		default:
			continue
		}
		refs = append(refs, r)
	}
	st.Inbound = refs
	return st, nil
}

// save writes the state atomically and durably.
func (f *stateFile) save(st *state) error {
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("qqbot: state: %w", err)
	}
	tmp, err := os.CreateTemp(f.dir, "."+f.name+"-*.tmp")
	if err != nil {
		return fmt.Errorf("qqbot: state: %w", err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("qqbot: state: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(name, f.path()); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("qqbot: state: %w", err)
	}
	if d, err := os.Open(f.dir); err == nil { // make the rename durable
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// prune drops inbound messages whose reply window has passed and bounds
// the ledger: per chat the newest maxRefsPerChat, overall the newest
// maxRefs.
func (st *state) prune(now time.Time, window func(route) time.Duration) {
	sort.SliceStable(st.Inbound, func(i, j int) bool { return st.Inbound[i].At.After(st.Inbound[j].At) })
	perChat := map[channel.Chat]int{}
	kept := st.Inbound[:0]
	for _, r := range st.Inbound {
		if now.Sub(r.At) > window(r.Route) || perChat[r.Chat] >= maxRefsPerChat || len(kept) >= maxRefs {
			continue
		}
		perChat[r.Chat]++
		kept = append(kept, r)
	}
	clear(st.Inbound[len(kept):])
	st.Inbound = kept
}

// find returns the inbound message with this id in chat.
func (st *state) find(chat channel.Chat, id string) *inboundRef {
	for _, r := range st.Inbound {
		if r.Chat == chat && r.ID == id {
			return r
		}
	}
	return nil
}
