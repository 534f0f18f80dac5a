package openai

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/openai/openai-go/v3/option"
)

// Defaults used by [New] and [FromEnv].
const (
	// DefaultBaseURL is the endpoint used when Config.BaseURL is empty.
	DefaultBaseURL = "https://api.openai.com/v1"
	// DefaultModel is the model FromEnv picks when PERSONA_MODEL is unset.
	DefaultModel = "gpt-4o-mini"
	// DefaultTimeout bounds one call when Config.Timeout is zero.
	DefaultTimeout = 120 * time.Second
)

// The environment variables read by [FromEnv].
const (
	EnvBaseURL      = "PERSONA_MODEL_BASE_URL"
	EnvAPIKey       = "PERSONA_MODEL_API_KEY"
	EnvOpenAIAPIKey = "OPENAI_API_KEY"
	EnvModel        = "PERSONA_MODEL"
)

// Config configures a [Model]. The zero value of every field except Model
// means "use the default".
type Config struct {
	// BaseURL is the OpenAI-compatible endpoint including its version path,
	// e.g. "http://localhost:11434/v1". Empty means [DefaultBaseURL]. Requests
	// go to BaseURL + "/chat/completions".
	BaseURL string
	// APIKey is sent as a bearer token. Empty sends no Authorization header
	// (fine for local servers). The process environment is never consulted.
	APIKey string
	// Model is the model name used for every purpose without an entry in
	// PurposeModels. Required.
	Model string
	// Timeout bounds one call (0 = [DefaultTimeout]). A shorter deadline on
	// the caller's context wins.
	Timeout time.Duration
	// HTTPClient sends the requests (nil = [http.DefaultClient]).
	HTTPClient *http.Client
	// PurposeModels optionally names a model per request purpose, e.g.
	// {"proactive_reply_router": "small-model"}. Purposes not listed use
	// Model. The map is copied by [New].
	PurposeModels map[string]string
	// MaxCompletionTokens sends Request.MaxTokens as "max_completion_tokens"
	// instead of the older "max_tokens". OpenAI's reasoning models require
	// it; many OpenAI-compatible servers only understand "max_tokens", which
	// is therefore the default.
	MaxCompletionTokens bool
	// Vision declares that the model takes image parts (user messages
	// with agent.Part images); [Model.AcceptsImages] reports it.
	Vision bool
}

// validate checks c and returns the normalised base URL.
func (c Config) validate() (string, error) {
	if strings.TrimSpace(c.Model) == "" {
		return "", errors.New("openai: Config.Model is required")
	}
	for purpose, name := range c.PurposeModels {
		if strings.TrimSpace(name) == "" {
			return "", fmt.Errorf("openai: Config.PurposeModels[%q] is empty", purpose)
		}
	}
	if c.Timeout < 0 {
		return "", fmt.Errorf("openai: Config.Timeout must not be negative, got %s", c.Timeout)
	}
	return baseURL("Config", c.BaseURL)
}

// baseURL checks an endpoint URL ("" = [DefaultBaseURL]); cfg names the
// config type in errors.
func baseURL(cfg, raw string) (string, error) {
	base := strings.TrimSpace(raw)
	if base == "" {
		return DefaultBaseURL, nil
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("openai: %s.BaseURL %q does not parse: %w", cfg, base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("openai: %s.BaseURL %q must be an http or https URL", cfg, base)
	}
	if u.Host == "" {
		return "", fmt.Errorf("openai: %s.BaseURL %q has no host", cfg, base)
	}
	return base, nil
}

// clientOptions are the SDK options of every client here: the base URL,
// the key and client given, and no SDK retries. The services are built
// from these options alone (never with the SDK's NewClient, whose
// defaults read OPENAI_API_KEY, OPENAI_BASE_URL and other variables from
// the process environment).
func clientOptions(base, apiKey string, hc *http.Client) []option.RequestOption {
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithMaxRetries(0),
	}
	if apiKey != "" {
		opts = append(opts, option.WithAPIKey(apiKey))
	}
	if hc != nil {
		opts = append(opts, option.WithHTTPClient(hc))
	}
	return opts
}

// FromEnv builds a Config from environment variables looked up with getenv
// (nil means [os.Getenv]):
//
//   - PERSONA_MODEL_BASE_URL: Config.BaseURL
//   - PERSONA_MODEL_API_KEY: Config.APIKey, falling back to OPENAI_API_KEY
//   - PERSONA_MODEL: Config.Model, default [DefaultModel]
//
// ok is false, and the Config empty, when neither an API key nor a base URL
// is set: there is no model to talk to. The result is not validated; pass it
// to [New].
func FromEnv(getenv func(string) string) (cfg Config, ok bool) {
	if getenv == nil {
		getenv = os.Getenv
	}
	base := strings.TrimSpace(getenv(EnvBaseURL))
	key := strings.TrimSpace(getenv(EnvAPIKey))
	if key == "" {
		key = strings.TrimSpace(getenv(EnvOpenAIAPIKey))
	}
	if base == "" && key == "" {
		return Config{}, false
	}
	model := strings.TrimSpace(getenv(EnvModel))
	if model == "" {
		model = DefaultModel
	}
	return Config{BaseURL: base, APIKey: key, Model: model}, true
}
