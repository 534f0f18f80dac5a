package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/internal/botenv"
	"github.com/personakit/persona/internal/botrun"
)

// The environment variables the bot reads (besides the shared ones of
// internal/botrun).
const (
	envClientID     = "PERSONA_DINGTALK_CLIENT_ID"
	envClientSecret = "PERSONA_DINGTALK_CLIENT_SECRET"
	envRobotCode    = "PERSONA_DINGTALK_ROBOT_CODE"
	envAPI          = "PERSONA_DINGTALK_API"
	envMarkdown     = "PERSONA_DINGTALK_MARKDOWN"
	envQuote        = "PERSONA_DINGTALK_QUOTE"
	envSoul         = botenv.EnvSoul
	envData         = botenv.EnvData
	envOwner        = botenv.EnvOwner
	envLogLevel     = botenv.EnvLogLevel
	envMemory       = botenv.EnvMemory
)

// defaultDataDir holds the database.
const defaultDataDir = "data/dingtalk"

// config is the platform part of the configuration, as read from the
// environment (the shared part is read by the runner, internal/botrun).
type config struct {
	clientID  string
	secret    string // never printed
	robotCode string // "" = the client id
	api       string
	markdown  bool
	quote     bool
}

// readConfig reads and checks the DingTalk variables; problems go to env.
// The secret never appears in a problem.
func readConfig(env *botrun.Env) config {
	cfg := config{
		clientID:  env.Require(envClientID),
		secret:    env.Require(envClientSecret),
		robotCode: env.Get(envRobotCode),
		api:       env.Get(envAPI),
		markdown:  env.Bool(envMarkdown, false),
		quote:     env.Bool(envQuote, true),
	}
	if cfg.clientID != "" && strings.ContainsAny(cfg.clientID, " \t\"\\/?#") {
		env.Bad("%s=%q: want the app's Client ID (AppKey) from the DingTalk developer console, e.g. dingxxxxxxxxxxxxxxxx", envClientID, cfg.clientID)
	}
	if strings.ContainsAny(cfg.secret, " \t") {
		env.Bad("%s contains white space; copy the app's Client Secret (AppSecret) exactly", envClientSecret)
	}
	if strings.ContainsAny(cfg.robotCode, " \t:") {
		env.Bad("%s=%q: want the robot's RobotCode (for an internal app's robot it is the Client ID; leave it unset)", envRobotCode, cfg.robotCode)
	}
	if cfg.api == "" {
		cfg.api = dingtalk.DefaultAPIBase
	} else if u, err := url.Parse(cfg.api); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		env.Bad("%s=%q: want the http(s) base URL of the DingTalk OpenAPI (default %s)", envAPI, cfg.api, dingtalk.DefaultAPIBase)
	}
	return cfg
}

// checkOwner accepts a DingTalk user id (the staff id, userId, the
// organisation's id of a member).
func checkOwner(id string) error {
	if strings.ContainsAny(id, " \t\"") {
		return fmt.Errorf("%q is not a DingTalk user id (the userId shown in the admin console's member details)", id)
	}
	return nil
}
