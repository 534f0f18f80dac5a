package route

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrUnparsable is wrapped by every error ParseRatings returns.
var ErrUnparsable = errors.New("route: unparsable router output")

// The values of Rating.Directed.
const (
	DirectedYes = "yes"
	DirectedNo  = "no"
)

// Rating is the router model's answer for one candidate message.
type Rating struct {
	// MessageID is the candidate's id as the answer names it (the
	// ModelRouter accepts the alias it showed, the real message id an
	// agent.Private boundary restores, or the position label c1, c2, …).
	MessageID string `json:"message_id"`
	// Directed is "yes" or "no": is the message clearly addressed to the
	// bot.
	Directed string `json:"directed"`
	// DirectedReason is the model's short reason for Directed.
	DirectedReason string `json:"directed_reason"`
	// ChatIn is how natural it would be to chime in, in [0,1].
	ChatIn float64 `json:"chat_in"`
	// ChatInReason is the model's short reason for ChatIn.
	ChatInReason string `json:"chat_in_reason"`
}

// OutputSchema is the shape the router model must answer in.
const OutputSchema = `{"candidates":[{"message_id":"the candidate's message_id","relevance":{"directed":"yes|no","reason":"one short sentence"},"chat_in":{"score":0.0,"reason":"one short sentence"}}]}`

type wireOutput struct {
	Candidates *[]wireCandidate `json:"candidates"`
}

type wireCandidate struct {
	MessageID wireID `json:"message_id"`
	Relevance *struct {
		Directed wireYesNo  `json:"directed"`
		Reason   wireString `json:"reason"`
	} `json:"relevance"`
	ChatIn *struct {
		Score  *wireScore `json:"score"`
		Reason wireString `json:"reason"`
	} `json:"chat_in"`
}

// wireID accepts a string or a number.
type wireID string

func (w *wireID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*w = wireID(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("message_id %s is neither a string nor a number", b)
	}
	*w = wireID(n.String())
	return nil
}

// wireYesNo accepts "yes"/"no" (any case, trimmed) or true/false.
type wireYesNo string

func (w *wireYesNo) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case bool:
		*w = DirectedNo
		if x {
			*w = DirectedYes
		}
		return nil
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "yes", "true":
			*w = DirectedYes
			return nil
		case "no", "false":
			*w = DirectedNo
			return nil
		}
	}
	return fmt.Errorf(`directed %s is not "yes" or "no"`, b)
}

// wireScore accepts a number or a numeric string in [0,1].
type wireScore float64

func (w *wireScore) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		var s string
		if json.Unmarshal(b, &s) != nil {
			return fmt.Errorf("score %s is not a number", b)
		}
		if f, err = strconv.ParseFloat(strings.TrimSpace(s), 64); err != nil {
			return fmt.Errorf("score %s is not a number", b)
		}
	}
	if math.IsNaN(f) || f < 0 || f > 1 {
		return fmt.Errorf("score %s is outside [0,1]", b)
	}
	*w = wireScore(f)
	return nil
}

// wireString accepts a string or null.
type wireString string

func (w *wireString) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("reason %s is not a string", b)
	}
	*w = wireString(s)
	return nil
}

// StripFences returns the JSON object inside a model answer: surrounding
// space and a Markdown code fence (```json … ```) removed; prose around a
// single object is cut off at its outer braces.
func StripFences(text string) string {
	s := strings.TrimSpace(text)
	if rest, ok := strings.CutPrefix(s, "```"); ok {
		// Drop the info string ("json") up to the end of the first line.
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			rest = rest[i+1:]
		} else {
			rest = strings.TrimPrefix(rest, "json")
		}
		if i := strings.LastIndex(rest, "```"); i >= 0 {
			rest = rest[:i]
		}
		s = strings.TrimSpace(rest)
	}
	if !strings.HasPrefix(s, "{") {
		i, j := strings.IndexByte(s, '{'), strings.LastIndexByte(s, '}')
		if i >= 0 && j > i {
			s = s[i : j+1]
		}
	}
	return s
}

// ParseRatings parses a router model's answer (see OutputSchema) into
// ratings, in answer order. Code fences are stripped; "directed" may also
// be a JSON boolean and "score" a numeric string; "message_id" may be a
// number. A missing relevance or chat_in object, a missing score, a
// "directed" other than yes/no, a score outside [0,1] or a repeated
// message id is an error wrapping ErrUnparsable. Unknown fields are
// ignored.
func ParseRatings(text string) ([]Rating, error) {
	s := StripFences(text)
	if s == "" {
		return nil, fmt.Errorf("%w: empty answer", ErrUnparsable)
	}
	var out wireOutput
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnparsable, err)
	}
	if out.Candidates == nil {
		return nil, fmt.Errorf(`%w: no "candidates" array`, ErrUnparsable)
	}
	ratings := make([]Rating, 0, len(*out.Candidates))
	seen := make(map[string]bool, len(*out.Candidates))
	for i, c := range *out.Candidates {
		id := strings.TrimSpace(string(c.MessageID))
		switch {
		case id == "":
			return nil, fmt.Errorf("%w: candidate %d has no message_id", ErrUnparsable, i)
		case seen[id]:
			return nil, fmt.Errorf("%w: candidate %q appears twice", ErrUnparsable, id)
		case c.Relevance == nil || c.Relevance.Directed == "":
			return nil, fmt.Errorf("%w: candidate %q has no relevance.directed", ErrUnparsable, id)
		case c.ChatIn == nil || c.ChatIn.Score == nil:
			return nil, fmt.Errorf("%w: candidate %q has no chat_in.score", ErrUnparsable, id)
		}
		seen[id] = true
		ratings = append(ratings, Rating{
			MessageID: id, Directed: string(c.Relevance.Directed), DirectedReason: string(c.Relevance.Reason),
			ChatIn: float64(*c.ChatIn.Score), ChatInReason: string(c.ChatIn.Reason),
		})
	}
	return ratings, nil
}
