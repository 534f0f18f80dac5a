package channel

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultProfile is the profile used when an event or pipeline names none.
const DefaultProfile = "default"

// SessionKey returns the canonical session key
// "<profile>:<platform>:<bot id>:<group|private>:<chat id>". An empty profile
// becomes DefaultProfile.
func SessionKey(profile, platform, botID string, chat Chat) string {
	if profile == "" {
		profile = DefaultProfile
	}
	return profile + ":" + platform + ":" + botID + ":" + string(chat.Kind) + ":" + chat.ID
}

// SessionParts is a parsed session key.
type SessionParts struct {
	Profile  string
	Platform string
	BotID    string
	Chat     Chat
}

// String renders the parts back into the canonical key.
func (p SessionParts) String() string { return SessionKey(p.Profile, p.Platform, p.BotID, p.Chat) }

// ErrBadSessionKey is wrapped by ParseSessionKey errors.
var ErrBadSessionKey = errors.New("channel: malformed session key")

// ParseSessionKey splits a canonical session key. The chat id is everything
// after the fourth colon, so chat ids may contain colons.
func ParseSessionKey(key string) (SessionParts, error) {
	parts := strings.SplitN(key, ":", 5)
	if len(parts) != 5 {
		return SessionParts{}, fmt.Errorf("%w: %q has %d of 5 parts", ErrBadSessionKey, key, len(parts))
	}
	p := SessionParts{Profile: parts[0], Platform: parts[1], BotID: parts[2], Chat: Chat{Kind: ChatKind(parts[3]), ID: parts[4]}}
	switch {
	case p.Profile == "" || p.Platform == "" || p.BotID == "" || p.Chat.ID == "":
		return SessionParts{}, fmt.Errorf("%w: %q has an empty part", ErrBadSessionKey, key)
	case !p.Chat.Kind.Valid():
		return SessionParts{}, fmt.Errorf("%w: %q: chat kind %q", ErrBadSessionKey, key, p.Chat.Kind)
	}
	return p, nil
}

// keyEscaper escapes the key separator inside key components, so that ids
// containing "/" (DingTalk's base64 ids) cannot make two keys collide.
var keyEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// Key returns the event's canonical dedupe key
// "<platform>/<bot id>/<chat kind>:<chat id>/<message id>", with "%" and "/"
// inside the ids percent-escaped. Events without a
// message id (some notices) get "sha256:" and the hash of their canonical
// content, so a redelivery of the same notice maps to the same key.
func (e *Event) Key() string {
	if e.MessageID != "" {
		return keyEscaper.Replace(e.Platform) + "/" + keyEscaper.Replace(e.BotID) + "/" + string(e.Chat.Kind) + ":" +
			keyEscaper.Replace(e.Chat.ID) + "/" + keyEscaper.Replace(e.MessageID)
	}
	h := sha256.New()
	w := func(s string) { h.Write([]byte(strconv.Itoa(len(s)) + ":" + s)) }
	w(e.Platform)
	w(e.BotID)
	w(e.Chat.String())
	w(string(e.Kind))
	w(strconv.FormatInt(e.Time.UnixMilli(), 10))
	w(e.Sender.ID)
	if e.Notice != nil {
		w(e.Notice.Type)
		w(e.Notice.Operator)
		w(e.Notice.UserID)
		w(e.Notice.TargetMessageID)
		if e.Notice.Flag != "" {
			// A request's flag tells two requests of one person apart
			// (added only when set: older keys stay as they were).
			w(e.Notice.Flag)
		}
	}
	w(e.Text())
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
