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
	maxStateBytes  = 16 << 20
	// maxParts bounds the part records; the oldest go first.
	maxParts = 4096
	// partRetention is how long a part record outlives the reply window
	// of the message it replied to: a resend of its chunk within it
	// returns the recorded outcome instead of sending again.
	partRetention = 24 * time.Hour
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

// inboundRef is one inbound message the bot may reply to (passively).
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
	// Next is the last msg_seq given out for this message (and so the
	// number of replies it took).
	Next int `json:"next,omitempty"`
}

// partRec is one message of a chunk (its text, or one of its media),
// named by the chunk's Outgoing.IdempotencyKey ("#<n>" appended for the
// n-th medium). It is written before the platform call and kept apart from
// the inbound messages, so it outlives their pruning: a resend of the
// chunk skips the parts delivered and sends the others with the msg_id and
// msg_seq they were given.
type partRec struct {
	Chat   channel.Chat `json:"chat"`
	Route  route        `json:"route"`
	Target string       `json:"target"`
	// MsgID and Seq are the reply assignment (MsgID "" = an active
	// message; Seq 0 on guild routes).
	MsgID string `json:"msg_id,omitempty"`
	Seq   int    `json:"seq,omitempty"`
	// RefAt is when the replied-to message was sent (its window starts
	// there); At is when the part was assigned.
	RefAt time.Time `json:"ref_at"`
	At    time.Time `json:"at"`
	// ID is the platform id once the part was delivered.
	ID string `json:"id,omitempty"`
	// Unsure: an attempt ended without a definitive answer (a transport
	// error, a 5xx, a lost answer, a call cut off by its context), so the
	// platform may have the message.
	Unsure bool `json:"unsure,omitempty"`
}

// state is what survives a restart (Config.StateDir): the gateway session
// and the reply ledger.
type state struct {
	// SessionID and Seq resume the gateway session; Seq is the last
	// dispatch the sink accepted (or that needed no delivery).
	SessionID string        `json:"session_id,omitempty"`
	Seq       int64         `json:"seq,omitempty"`
	Inbound   []*inboundRef `json:"inbound,omitempty"`
	// Parts are the messages of outgoing chunks by part key (see
	// partRec).
	Parts map[string]*partRec `json:"parts,omitempty"`
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
	for k, p := range st.Parts {
		if k == "" || p == nil || !p.Chat.Kind.Valid() || p.Target == "" || p.RefAt.IsZero() || p.At.IsZero() || p.Seq < 0 {
			delete(st.Parts, k)
			continue
		}
		switch p.Route {
		case routeGroup, routeC2C, routeChannel, routeDM:
		default:
			delete(st.Parts, k)
		}
	}
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
// them: per chat the newest maxRefsPerChat, overall the newest maxRefs.
// Part records go partRetention after the window of the message they
// replied to, and beyond maxParts the oldest go first.
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

	for k, p := range st.Parts {
		if now.Sub(p.RefAt) > window(p.Route)+partRetention {
			delete(st.Parts, k)
		}
	}
	if len(st.Parts) > maxParts {
		keys := make([]string, 0, len(st.Parts))
		for k := range st.Parts {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, b := st.Parts[keys[i]], st.Parts[keys[j]]
			if !a.At.Equal(b.At) {
				return a.At.Before(b.At)
			}
			return keys[i] < keys[j]
		})
		for _, k := range keys[:len(keys)-maxParts] {
			delete(st.Parts, k)
		}
	}
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
