// Package botrun is the runner the reference bots share: it reads the
// variables every bot has (persona, data directory, owners, model, memory,
// agent, media), lets the platform read its own and build its channel,
// builds the pipeline, prints what runs and serves until the context ends.
// Each examples/<platform>/main.go is a Platform and a call to Run.
//
// Configuration problems are collected and reported together, each naming
// its variable, before anything is created: a bad configuration leaves no
// data directory behind and prints nothing to stdout.
package botrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
	// The zone database inside the binary: schedules name IANA zones,
	// and a container may have none.
	_ "time/tzdata"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/eventcenter"
	"github.com/personakit/persona/internal/botenv"
)

// EnvHTTPAddr is the variable read for Setup.Handler's listen address.
const EnvHTTPAddr = "PERSONA_HTTP_ADDR"

// EnvHTTPToken turns the event center on: the operator's bearer token (at
// least eventcenter.MinTokenLen characters), served under EventCenterPath
// on PERSONA_HTTP_ADDR.
const EnvHTTPToken = "PERSONA_HTTP_TOKEN"

// EnvWeb turns link reading on (persona.Options.Web): links in messages
// are read and shown to the model, and the agent gets web_fetch.
const EnvWeb = "PERSONA_WEB"

// EventCenterPath is where the event center is served.
const EventCenterPath = "/events/"

// DefaultHTTPAddr is where Setup.Handler is served when EnvHTTPAddr is
// unset.
const DefaultHTTPAddr = "127.0.0.1:8080"

// Env reads a bot's environment; problems are collected and reported
// together, each naming its variable.
type Env struct {
	getenv func(string) string
	errs   []error
}

// NewEnv returns an Env over getenv (tests of a platform's Setup use it).
func NewEnv(getenv func(string) string) *Env { return &Env{getenv: getenv} }

// Get returns the trimmed value of name, "" when unset.
func (e *Env) Get(name string) string { return strings.TrimSpace(e.getenv(name)) }

// Require is Get, recording "NAME is required" when the value is empty.
func (e *Env) Require(name string) string {
	v := e.Get(name)
	if v == "" {
		e.Bad("%s is required", name)
	}
	return v
}

// Bool reads a switch: 1/0, true/false, on/off, yes/no in any case; def
// when unset. Anything else is recorded as a problem.
func (e *Env) Bool(name string, def bool) bool {
	v := e.Get(name)
	if v == "" {
		return def
	}
	on, ok := botenv.Bool(v)
	if !ok {
		e.Bad("%s=%q: want on or off (1/0, true/false, on/off, yes/no)", name, v)
		return def
	}
	return on
}

// Duration reads a Go duration ("30s", "5m"); def when unset. A bad or
// negative value is recorded as a problem.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	v := e.Get(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		e.Bad("%s=%q: want a duration such as 30s or 5m", name, v)
		return def
	}
	return d
}

// Bad records a problem.
func (e *Env) Bad(format string, a ...any) { e.errs = append(e.errs, fmt.Errorf(format, a...)) }

// OK reports whether no problem has been recorded so far: a Setup checks
// it before it opens anything.
func (e *Env) OK() bool { return len(e.errs) == 0 }

// Err joins the recorded problems (nil when none).
func (e *Env) Err() error { return errors.Join(e.errs...) }

// Platform is what one reference bot adds to the shared runner.
type Platform struct {
	// Title heads the banner, e.g. "persona QQ official bot".
	Title string
	// DataDir is the default data directory, slash-separated.
	DataDir string
	// Soul is the built-in SOUL.md; SoulName how the banner names it.
	Soul     string
	SoulName string
	// Owner checks one owner id (nil: any non-empty id).
	Owner func(id string) error
	// Setup reads the platform's own variables from env and builds the
	// channel. It is called after the shared variables are read; if env
	// has recorded problems after Setup, the runner reports them all and
	// stops (it calls Setup.Close when Setup returned one). A Setup should
	// check env.OK before it opens anything, and may then return nil.
	Setup func(env *Env, s *Start) (*Setup, error)
	// MapError rewrites the pipeline's final error (optional).
	MapError func(error) error
}

// Start is what Setup may use.
type Start struct {
	// Log is the bot's logger (stderr, at PERSONA_LOG_LEVEL).
	Log *slog.Logger
	// DataDir is the data directory (PERSONA_DATA or Platform.DataDir).
	DataDir string
	// Clock is nil in production.
	Clock clock.Clock
}

// Setup is what a platform contributes.
type Setup struct {
	Channel channel.Channel
	// Banner lines are printed to stdout after the shared ones.
	Banner []string
	// Warn logs risky but working settings at start (optional).
	Warn func(log *slog.Logger)
	// Handler, when set, is served on PERSONA_HTTP_ADDR (default
	// 127.0.0.1:8080): webhooks and callbacks. The banner prints the URL.
	Handler http.Handler
	// Close releases what Setup opened, after the pipeline stopped
	// (optional).
	Close func()
}

// Run reads the shared variables (PERSONA_SOUL, PERSONA_DATA,
// PERSONA_OWNER, PERSONA_ALIASES, PERSONA_LOG_LEVEL, PERSONA_MEMORY,
// PERSONA_AGENT, the model and media variables), calls p.Setup, builds the
// pipeline, prints the banner to stdout and serves until ctx ends (then
// returns nil) or fails.
func Run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer, p Platform) error {
	env := NewEnv(getenv)
	common, cerrs := botenv.Load(getenv, botenv.Defaults{Soul: p.Soul, SoulName: p.SoulName, DataDir: p.DataDir, Owner: p.Owner})
	env.errs = append(env.errs, cerrs...)
	model, modelDesc, _, merr := botenv.Model(getenv)
	if merr != nil {
		env.errs = append(env.errs, merr)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: common.Level}))
	httpAddr := env.Get(EnvHTTPAddr)
	token := env.Get(EnvHTTPToken)
	if token != "" && len(token) < eventcenter.MinTokenLen {
		env.Bad("%s must be at least %d characters (a long random string)", EnvHTTPToken, eventcenter.MinTokenLen)
	}
	readLinks := env.Bool(EnvWeb, false)
	var (
		setup *Setup
		err   error
	)
	if p.Setup == nil {
		return errors.New("botrun: Platform.Setup is nil")
	}
	setup, err = p.Setup(env, &Start{Log: log, DataDir: common.DataDir})
	closeSetup := func() {
		if setup != nil && setup.Close != nil {
			setup.Close()
		}
	}
	if cfgErr := env.Err(); cfgErr != nil {
		closeSetup()
		return fmt.Errorf("invalid configuration:\n  %s", strings.ReplaceAll(cfgErr.Error(), "\n", "\n  "))
	}
	if err != nil {
		closeSetup()
		return err
	}
	if setup == nil || setup.Channel == nil {
		closeSetup()
		return errors.New("botrun: Setup returned no channel")
	}
	defer closeSetup()

	var ln net.Listener
	if setup.Handler != nil || token != "" {
		if httpAddr == "" {
			httpAddr = DefaultHTTPAddr
		}
		if ln, err = net.Listen("tcp", httpAddr); err != nil {
			return fmt.Errorf("%s=%s: %w", EnvHTTPAddr, httpAddr, err)
		}
		defer func() { _ = ln.Close() }()
	} else if httpAddr != "" {
		log.Warn("http_addr_unused", "hint", EnvHTTPAddr+" is only used by bots that receive callbacks over HTTP or serve the event center ("+EnvHTTPToken+")")
	}
	var reader *web.Reader
	if readLinks {
		reader = web.New(web.Config{})
	}

	pl, err := persona.New(persona.Options{
		Channels:    []channel.Channel{setup.Channel},
		DataDir:     common.DataDir,
		DatabaseURL: common.DatabaseURL,
		Persona:     common.Soul,
		Model:       model,
		Owners:      common.Owners,
		Aliases:     common.Aliases,
		Memory:      common.Memory,
		Agent:       common.Agent,
		Media:       common.Media,
		Web:         reader,
		Logger:      log.With("component", "persona"),
	})
	if err != nil {
		return err
	}
	defer func() { _ = pl.Close() }()
	handler := setup.Handler
	if token != "" {
		center, err := pl.EventCenter(eventcenter.Config{Token: token, Logger: log.With("component", "eventcenter")})
		if err != nil {
			return err
		}
		defer center.Close()
		mux := http.NewServeMux()
		mux.Handle(EventCenterPath, http.StripPrefix(strings.TrimSuffix(EventCenterPath, "/"), center))
		if setup.Handler != nil {
			mux.Handle("/", setup.Handler)
		}
		handler = mux
	}

	fmt.Fprintln(stdout, p.Title)
	line := func(label, text string) { fmt.Fprintf(stdout, "  %-9s %s\n", label+":", text) }
	line("model", modelDesc)
	line("persona", common.SoulFrom)
	line("data", common.StorageDesc())
	line("memory", fmt.Sprintf("%s (%s); agent loop: %s (%s)", botenv.OnOff(common.Memory), botenv.EnvMemory, botenv.OnOff(common.Agent), botenv.EnvAgent))
	line("media", common.MediaDesc)
	for _, b := range setup.Banner {
		fmt.Fprintln(stdout, b)
	}
	var srv *http.Server
	if ln != nil {
		if setup.Handler != nil {
			line("http", "serving callbacks at "+HostURL("http", ln.Addr()))
		}
		if token != "" {
			line("events", "event center at "+strings.TrimSuffix(HostURL("http", ln.Addr()), "/")+EventCenterPath+" (token: "+EnvHTTPToken+")")
		}
		srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http_serve_failed", "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	if setup.Warn != nil {
		setup.Warn(log)
	}
	if len(common.Owners) == 0 {
		log.Info("no_owners", "hint", "set "+botenv.EnvOwner+" to your account id to get owner rights")
	}
	log.Info("bot_starting", "data", common.DataDir, "owners", len(common.Owners), "memory", common.Memory, "agent", common.Agent)
	err = pl.Run(ctx)
	log.Info("bot_stopped", "err", err)
	if p.MapError != nil {
		err = p.MapError(err)
	}
	return err
}

// HostURL is the URL another machine reaches a listener at; an unspecified
// listen address (":8080", "0.0.0.0:8080") is shown as <this-host>.
func HostURL(scheme string, a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return scheme + "://" + a.String() + "/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "<this-host>"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/"
}
