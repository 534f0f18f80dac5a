package botenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/agent/openai"
	"github.com/personakit/persona/outbound"
)

// The shared environment variables (besides the model variables of
// agent/openai.FromEnv).
const (
	EnvSoul     = "PERSONA_SOUL"
	EnvData     = "PERSONA_DATA"
	EnvOwner    = "PERSONA_OWNER"
	EnvAliases  = "PERSONA_ALIASES"
	EnvLogLevel = "PERSONA_LOG_LEVEL"
	// EnvMemory turns long-term memory (persona.Options.Memory) on or off;
	// default on.
	EnvMemory = "PERSONA_MEMORY"
	// EnvAgent turns the agent tool loop (persona.Options.Agent) on or
	// off; default off.
	EnvAgent = "PERSONA_AGENT"
	// EnvVision says the model takes pictures (openai.Config.Vision);
	// default off: pictures are then shown as placeholders.
	EnvVision = "PERSONA_MODEL_VISION"
	// EnvMedia turns media handling (persona.Options.Media) on or off;
	// default on.
	EnvMedia = "PERSONA_MEDIA"
	// EnvTranscribeModel names the speech-to-text model on the same
	// OpenAI-compatible server as the chat model ("whisper-1", …); unset,
	// voice clips are not transcribed.
	EnvTranscribeModel = "PERSONA_TRANSCRIBE_MODEL"
	// EnvDatabaseURL keeps the bot's state in PostgreSQL instead of the
	// SQLite file in the data directory (persona.Options.DatabaseURL): a
	// postgres:// URL. Several processes with the same URL run one bot.
	EnvDatabaseURL = "PERSONA_DATABASE_URL"
)

// Common is what every reference bot reads.
type Common struct {
	Soul     string // SOUL.md text
	SoulFrom string // where it came from, for the banner
	DataDir  string
	// DatabaseURL is persona.Options.DatabaseURL (PERSONA_DATABASE_URL).
	DatabaseURL string
	Owners      []string
	Aliases     []string
	Level       slog.Level
	Memory      bool // persona.Options.Memory (PERSONA_MEMORY, default on)
	Agent       bool // persona.Options.Agent (PERSONA_AGENT, default off)
	// Media is persona.Options.Media (PERSONA_MEDIA, PERSONA_TRANSCRIBE_MODEL);
	// MediaDesc describes it for the banner.
	Media     persona.MediaOptions
	MediaDesc string
}

// StorageDesc describes where the state is kept, for a banner: the data
// directory, or the PostgreSQL server (its password never shown).
func (c Common) StorageDesc() string {
	if c.DatabaseURL == "" {
		return c.DataDir
	}
	host := "PostgreSQL"
	if u, err := url.Parse(c.DatabaseURL); err == nil && u.Host != "" {
		host += " at " + u.Host + u.Path
	}
	return host + " (" + EnvDatabaseURL + "); journal in " + c.DataDir
}

// Defaults are a bot's own defaults for Load.
type Defaults struct {
	Soul     string // the built-in SOUL.md
	SoulName string // how the banner names it
	DataDir  string // slash-separated
	// Owner checks one owner id (nil = any non-empty id).
	Owner func(id string) error
}

// Load reads the shared variables and returns every problem, each naming
// its variable.
func Load(getenv func(string) string, d Defaults) (Common, []error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }

	c := Common{Soul: d.Soul, SoulFrom: d.SoulName}
	if path := get(EnvSoul); path != "" {
		b, err := os.ReadFile(path)
		switch {
		case err != nil:
			bad("%s: %w", EnvSoul, err)
		case strings.TrimSpace(string(b)) == "":
			bad("%s: %s is empty", EnvSoul, path)
		default:
			c.Soul, c.SoulFrom = string(b), path
		}
	}
	c.DataDir = get(EnvData)
	if c.DataDir == "" {
		c.DataDir = filepath.FromSlash(d.DataDir)
	}
	if u := get(EnvDatabaseURL); u != "" {
		if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
			bad("%s: want a postgres:// URL", EnvDatabaseURL)
		} else {
			c.DatabaseURL = u
		}
	}
	c.Owners = List(get(EnvOwner))
	if d.Owner != nil {
		for _, id := range c.Owners {
			if err := d.Owner(id); err != nil {
				bad("%s: %w", EnvOwner, err)
			}
		}
	}
	c.Aliases = List(get(EnvAliases))
	if lv := get(EnvLogLevel); lv != "" {
		if err := c.Level.UnmarshalText([]byte(lv)); err != nil {
			bad("%s=%q: want debug, info, warn or error", EnvLogLevel, lv)
		}
	}
	flag := func(name string, def bool) bool {
		v := get(name)
		if v == "" {
			return def
		}
		on, ok := Bool(v)
		if !ok {
			bad("%s=%q: want on or off (1/0, true/false, on/off, yes/no)", name, v)
			return def
		}
		return on
	}
	c.Memory = flag(EnvMemory, true)
	c.Agent = flag(EnvAgent, false)
	var err error
	if c.Media, c.MediaDesc, err = Media(getenv); err != nil {
		errs = append(errs, err)
	}
	return c, errs
}

// Bool reads a boolean variable's value: 1, true, on and yes are true; 0,
// false, off and no are false (case-insensitive, surrounding blanks
// ignored); ok is false for anything else.
func Bool(s string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "on", "yes":
		return true, true
	case "0", "false", "off", "no":
		return false, true
	}
	return false, false
}

// OnOff renders a switch for a banner.
func OnOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// List splits a comma-separated variable, dropping blanks.
func List(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// Model returns the configured model and a line describing it, or the
// offline demo model (offline=true) when no model is configured.
func Model(getenv func(string) string) (m agent.Model, desc string, offline bool, err error) {
	vision := false
	if v := strings.TrimSpace(getenv(EnvVision)); v != "" {
		var ok bool
		if vision, ok = Bool(v); !ok {
			return nil, "", false, fmt.Errorf("%s=%q: want on or off (1/0, true/false, on/off, yes/no)", EnvVision, v)
		}
	}
	if cfg, ok := openai.FromEnv(getenv); ok {
		cfg.Vision = vision
		m, err := openai.New(cfg)
		if err != nil {
			return nil, "", false, fmt.Errorf("model (%s, %s, %s): %w", openai.EnvBaseURL, openai.EnvAPIKey, openai.EnvModel, err)
		}
		base := cfg.BaseURL
		if base == "" {
			base = "the OpenAI API"
		}
		desc := fmt.Sprintf("%s at %s", cfg.Model, base)
		if vision {
			desc += ", with vision"
		}
		return m, desc, false, nil
	}
	demo := agenttest.New()
	demo.Otherwise(agenttest.Func(OfflineReply))
	return demo, "offline demo model: no model is configured (set " + openai.EnvBaseURL + " and " + openai.EnvAPIKey +
		" or " + openai.EnvOpenAIAPIKey + ", and " + openai.EnvModel + "); it only echoes, everything else is the real pipeline", true, nil
}

// OfflineReply echoes the current message in two chat messages, so the
// demo shows the quote on the first chunk only. Memory extraction
// (PERSONA_MEMORY, on by default) gets an answer with no facts: the demo
// remembers nothing, and no extraction job fails over an echo.
func OfflineReply(_ context.Context, req agent.Request) (*agent.Response, error) {
	if req.Purpose == agent.PurposeMemory {
		return &agent.Response{Text: `{"candidates":[]}`, Model: "offline-demo"}, nil
	}
	current := ""
	for _, m := range req.Messages {
		if m.Role == agent.RoleUser && strings.HasPrefix(m.Content, "[current] ") {
			current = m.Content
		}
	}
	_, said, _ := strings.Cut(current, ": ")
	text := fmt.Sprintf("(offline demo) You said %q", strings.TrimSpace(said)) + outbound.MsgMarker + "(no model configured)"
	return &agent.Response{Text: text, Model: "offline-demo"}, nil
}

// ErrOwner is wrapped by owner-id checks that the bots pass to Load.
var ErrOwner = errors.New("not a valid account id")

// Media reads the media variables: PERSONA_MEDIA (on by default) and
// PERSONA_TRANSCRIBE_MODEL, whose model runs on the chat model's server
// (PERSONA_MODEL_BASE_URL and its key). desc describes the result for a
// banner.
func Media(getenv func(string) string) (opts persona.MediaOptions, desc string, err error) {
	if v := strings.TrimSpace(getenv(EnvMedia)); v != "" {
		on, ok := Bool(v)
		if !ok {
			return opts, "", fmt.Errorf("%s=%q: want on or off (1/0, true/false, on/off, yes/no)", EnvMedia, v)
		}
		if !on {
			opts.Off = true
			return opts, "off (" + EnvMedia + ")", nil
		}
	}
	name := strings.TrimSpace(getenv(EnvTranscribeModel))
	if name == "" {
		return opts, "pictures on; voice not transcribed (set " + EnvTranscribeModel + ")", nil
	}
	cfg, ok := openai.FromEnv(getenv)
	if !ok {
		return opts, "", fmt.Errorf("%s needs the model server (%s and %s or %s)", EnvTranscribeModel, openai.EnvBaseURL,
			openai.EnvAPIKey, openai.EnvOpenAIAPIKey)
	}
	t, err := openai.NewTranscriber(openai.TranscriberConfig{BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, Model: name})
	if err != nil {
		return opts, "", fmt.Errorf("%s: %w", EnvTranscribeModel, err)
	}
	opts.Transcriber = t
	return opts, "pictures on; voice transcribed by " + name, nil
}
