package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
)

// Outcome codes used by the expectations.
const (
	replied     = "replied"
	command     = "replied_command"
	proactive   = "replied_proactive"
	off         = "ignored_proactive_off"
	history     = HistoryOutcome
	video       = "ignored_video"
	level       = "ignored_member_level"
	blocked     = "ignored_blocked_user"
	quiet       = "ignored_quiet_hours"
	quietNotice = "It's late here, I'll answer in the morning" // the splitter drops the final full stop
)

// want is the expected output line of one input message.
type want struct {
	outcome string
	trigger string // "" = unprompted
}

// sampleWant is the expected outcome of every message of
// testdata/sample.jsonl, offline, with -alias Mira -owner u1 and
// testdata/config.json (group 200: u9 blocked, active 08:00–22:00 UTC with
// a quiet reply, member level ≥ 3). Offline there is no router model, so an
// unprompted message that passes G1–G9 ends at G10 (ignored_proactive_off)
// and a direct one is answered by the offline model.
//
// The replay decides one message at a time, so the burst m16–m21 (and the
// image m19 just before m20) is decided message by message: no merge.
var sampleWant = map[string]want{
	"m01": {off, ""},
	"m02": {off, ""},
	"m03": {off, ""},
	"m04": {replied, "mention"},
	"m05": {history, ""},
	"m06": {replied, "quote"}, // reply_to a line from "bot"
	"m07": {off, ""},
	"m08": {off, ""},
	"m09": {replied, "alias"}, // smart mode: talk about Mira outside quotes still counts
	"m10": {off, ""},          // “Mira” inside quotation marks
	"m11": {off, ""},          // "Mira" inside quotation marks
	"m12": {replied, "alias"}, // vocative, from the owner
	"m13": {history, ""},
	"m14": {replied, "quote"},
	"m15": {off, ""}, // quotes a person, not the bot
	"m16": {off, ""}, // burst from Eli …
	"m17": {off, ""},
	"m18": {replied, "mention"},
	"m19": {off, ""}, // image only: waits out the media-merge window
	"m20": {replied, "mention"},
	"m21": {replied, "mention"},
	"m22": {off, ""},
	"m23": {off, ""},          // mentions someone else
	"m24": {replied, "alias"}, // "Mira's": an apostrophe is no quotation mark
	"p01": {replied, "private"},
	"p02": {history, ""},
	"m25": {replied, "mention"}, // a stop request: offline (no audit) it is just answered
	"m26": {off, ""},            // 'Mira' in single quotes
	"m27": {off, ""},
	"p03": {replied, "private"},
	"m28": {video, ""},        // video only (G8)
	"m29": {replied, "alias"}, // case-insensitive
	"m30": {off, ""},
	"m31": {off, ""},
	"m32": {off, ""}, // "/status" from a non-owner is no command
	"p04": {replied, "private"},
	"m33": {command, "owner_command"}, // answered in code, without the model
	"m34": {history, ""},
	"m35": {replied, "quote"},
	"m36": {off, ""},
	"m37": {off, ""},
	"m38": {replied, "alias"},
	"g01": {off, ""},
	"g02": {level, ""},        // level 1 < 3
	"g03": {level, "mention"}, // also when addressed
	"g04": {replied, "mention"},
	"g05": {history, ""},
	"g06": {blocked, "quote"},
	"g07": {blocked, ""},
	"g08": {replied, "alias"}, // level unknown: allowed (default policy)
	"g09": {off, ""},
	"g10": {off, ""},
	"g11": {off, ""}, // an admin passes the level gate
	"g12": {level, ""},
	"g13": {replied, "quote"},
	"g14": {off, ""},
	"g15": {off, ""},
	"g16": {quiet, "mention"}, // quiet reply sent
	"g17": {quiet, "alias"},   // no second quiet reply within the hour
	"g18": {replied, "mention"},
	"g19": {quiet, ""},
	"g20": {quiet, "quote"},
}

// line is an output line as the tests read it.
type line struct {
	ID       string         `json:"id"`
	Outcome  string         `json:"outcome"`
	Reason   string         `json:"reason"`
	Directed string         `json:"directed"`
	ChatIn   *float64       `json:"chat_in"`
	Trigger  string         `json:"trigger"`
	Reply    []string       `json:"reply"`
	Summary  map[string]int `json:"summary"`
}

func noEnv(string) string { return "" }

// simulate runs the command and returns the result lines and the summary.
func simulate(t *testing.T, args []string, stdin string, h hooks) ([]line, map[string]int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := runWith(t.Context(), args, strings.NewReader(stdin), &out, &errOut, noEnv, h)
	require.NoError(t, err, "stderr: %s", errOut.String())
	var lines []line
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l line
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		lines = append(lines, l)
	}
	require.NotEmpty(t, lines)
	last := lines[len(lines)-1]
	require.NotNil(t, last.Summary, "the last line is the summary")
	return lines[:len(lines)-1], last.Summary
}

func sampleIDs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "sample.jsonl"))
	require.NoError(t, err)
	var ids []string
	for l := range strings.Lines(string(b)) {
		var v struct{ ID string }
		require.NoError(t, json.Unmarshal([]byte(l), &v))
		ids = append(ids, v.ID)
	}
	return ids
}

func TestSampleOffline(t *testing.T) {
	t.Parallel()
	ids := sampleIDs(t)
	require.GreaterOrEqual(t, len(ids), 60)
	require.Len(t, sampleWant, len(ids), "every message has an expectation")

	lines, summary := simulate(t, []string{"-in", "testdata/sample.jsonl", "-alias", "Mira", "-owner", "u1",
		"-config", "testdata/config.json"}, "", hooks{})
	require.Len(t, lines, len(ids), "one line per input message")
	counts := map[string]int{}
	for i, l := range lines {
		require.Equal(t, ids[i], l.ID, "input order")
		w, ok := sampleWant[l.ID]
		require.True(t, ok, l.ID)
		require.Equal(t, w.outcome, l.Outcome, "%s: %s", l.ID, l.Reason)
		require.Equal(t, w.trigger, l.Trigger, l.ID)
		require.Empty(t, l.Directed, "%s: no router offline", l.ID)
		require.Nil(t, l.ChatIn, l.ID)
		require.NotEmpty(t, l.Reason, l.ID)
		switch {
		case l.Outcome == replied:
			require.Len(t, l.Reply, 1, l.ID)
			require.True(t, strings.HasPrefix(l.Reply[0], OfflinePrefix), "%s: %q", l.ID, l.Reply[0])
		case l.ID == "g16":
			require.Equal(t, []string{quietNotice}, l.Reply)
		case l.Outcome == command:
			require.Len(t, l.Reply, 1, l.ID)
			require.True(t, strings.HasPrefix(l.Reply[0], "Up "), "%s: %q", l.ID, l.Reply[0])
		default:
			require.Empty(t, l.Reply, l.ID)
		}
		counts[l.Outcome]++
	}
	require.Equal(t, counts, summary)
	require.Equal(t, map[string]int{replied: 20, command: 1, off: 26, history: 5, video: 1, level: 3, blocked: 2, quiet: 4}, summary)
}

// TestSampleWithoutConfig runs the README's command line: without -config
// group 200 has no gates, so its direct messages are answered and the rest
// end at G10; without -owner, Ann's "/status" is no command.
func TestSampleWithoutConfig(t *testing.T) {
	t.Parallel()
	lines, summary := simulate(t, []string{"-in", "testdata/sample.jsonl", "-alias", "Mira"}, "", hooks{})
	for _, l := range lines {
		w := sampleWant[l.ID]
		switch {
		case l.ID == "m33":
			w = want{off, ""}
		case strings.HasPrefix(l.ID, "g") && w.outcome != history:
			w.outcome = off
			if w.trigger != "" {
				w.outcome = replied
			}
		}
		require.Equal(t, w.outcome, l.Outcome, "%s: %s", l.ID, l.Reason)
		require.Equal(t, w.trigger, l.Trigger, l.ID)
	}
	// As the README shows it.
	require.Equal(t, map[string]int{history: 5, off: 31, video: 1, replied: 25}, summary)
}

// rate is a router answer for one candidate.
func rate(directed string, score float64) agenttest.Step {
	return agenttest.Reply(fmt.Sprintf(`{"candidates":[{"message_id":"c1","relevance":{"directed":%q,"reason":"r"},"chat_in":{"score":%v,"reason":"s"}}]}`,
		directed, score))
}

const auditPass = `{"quality":{"ok":true,"problems":[],"send_confidence":0.95},"safety":{"score":0.9},"refusal":{"is_refusal":false,"confidence":0.1},` +
	`"closing":{"kind":"none","confidence":0.9},"group_stop":{"requested":false,"confidence":0.9},"loop":{"hit":false,"confidence":0.9}}`

// scripted answers the router from a script and everything else by
// purpose.
func scripted(router ...agenttest.Step) *agenttest.Model {
	m := agenttest.New().OnPurpose(agent.PurposeRouter, router...)
	m.Otherwise(agenttest.Func(func(_ context.Context, req agent.Request) (*agent.Response, error) {
		switch req.Purpose {
		case agent.PurposeAudit:
			return &agent.Response{Text: auditPass}, nil
		case agent.PurposeDedup:
			return &agent.Response{Text: `{"verdict":"keep","confidence":0.99}`}, nil
		case agent.PurposeChat:
			return &agent.Response{Text: "scripted reply"}, nil
		}
		return nil, fmt.Errorf("unexpected %s call", req.Purpose)
	}))
	return m
}

// TestScriptedRouter shows the router's ratings in the output: a model
// override (as an environment model would) turns the router on.
func TestScriptedRouter(t *testing.T) {
	t.Parallel()
	log := strings.Join([]string{
		`{"id":"r1","at":"2026-11-30T10:00:00Z","chat":"group:7","from":"u1","text":"anyone know a good ramen place?"}`,
		`{"id":"r2","at":"2026-11-30T10:00:10Z","chat":"group:7","from":"u2","text":"ramen is life"}`,
		`{"id":"r3","at":"2026-11-30T10:00:20Z","chat":"group:7","from":"u3","text":"what do you think?"}`,
		`{"id":"r4","at":"2026-11-30T10:00:30Z","chat":"group:7","from":"u2","text":"lol"}`,
		`{"id":"r5","at":"2026-11-30T10:01:30Z","chat":"group:7","from":"u4","text":"mmm, tonkotsu"}`,
		`{"id":"r6","at":"2026-11-30T10:01:40Z","chat":"group:7","from":"u1","mentions":["bot"],"text":"thoughts?"}`,
		`{"id":"r7","at":"2026-11-30T10:01:45Z","chat":"group:7","from":"bot","text":"tonkotsu all the way"}`,
		`{"id":"r8","at":"2026-11-30T10:02:00Z","chat":"group:7","from":"u5","text":"hmm"}`,
	}, "\n")
	model := scripted(
		rate("no", 0.91),                 // r1: chat-in passes at high (0.80)
		rate("no", 0.85),                 // r2: within the 30 s cooldown of r1's reply
		rate("yes", 0.4),                 // r3: a question to the bot
		rate("no", 0),                    // r4: stop
		rate("no", 0.5),                  // r5: below the threshold
		agenttest.Reply("no JSON"),       // r8: unparsable …
		agenttest.Reply("still no JSON"), // … twice
	)
	lines, summary := simulate(t, []string{"-level", "high"}, log, hooks{model: model})
	f := func(v float64) *float64 { return &v }
	wantLines := []struct {
		id, outcome, directed string
		chatIn                *float64
	}{
		{"r1", proactive, "no", f(0.91)},
		{"r2", "ignored_chat_cooldown", "no", f(0.85)},
		{"r3", proactive, "yes", f(0.4)},
		{"r4", "ignored_router_stop", "no", f(0)},
		{"r5", "ignored_chat_score", "no", f(0.5)},
		{"r6", replied, "", nil},
		{"r7", history, "", nil},
		{"r8", "ignored_router_failed", "", nil},
	}
	require.Len(t, lines, len(wantLines))
	for i, w := range wantLines {
		l := lines[i]
		require.Equal(t, w.id, l.ID)
		require.Equal(t, w.outcome, l.Outcome, "%s: %s", l.ID, l.Reason)
		require.Equal(t, w.directed, l.Directed, l.ID)
		require.Equal(t, w.chatIn, l.ChatIn, l.ID)
	}
	require.Equal(t, []string{"scripted reply"}, lines[0].Reply)
	require.Contains(t, lines[0].Reason, "chat-in score 0.91")
	require.Equal(t, map[string]int{proactive: 2, "ignored_chat_cooldown": 1, "ignored_router_stop": 1,
		"ignored_chat_score": 1, replied: 1, history: 1, "ignored_router_failed": 1}, summary)
}

func TestErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	ok := `{"id":"a","at":"2026-11-30T10:00:00Z","chat":"group:1","from":"u1","text":"hi"}`
	badConfig := writeFile("bad.json", "{\n  \"policy\": {\"blocked\": [\"u1\"]}\n}")
	badLevel := writeFile("level.json", `{"groups":{"5":{"proactive":{"chat_in":"loud"}}}}`)
	badDuration := writeFile("dur.json", `{"policy":{"stop_window":600}}`)
	badSyntax := writeFile("syntax.json", "{\n  \"groups\": {\n    \"5\": {\"min_member_level\": \"three\"}\n  }\n}")
	badPolicy := writeFile("policy.json", `{"policy":{"bot_chat":"sometimes"}}`)
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"unknown flag", []string{"-x"}, ok, "flag provided but not defined: -x"},
		{"bad level", []string{"-level", "loud"}, ok, `-level "loud": want off, low, medium, high or no_limit`},
		{"bad alias mode", []string{"-alias-mode", "fuzzy"}, ok, `-alias-mode "fuzzy"`},
		{"stray argument", []string{"log.jsonl"}, ok, `unexpected argument "log.jsonl"`},
		{"bot as owner", []string{"-owner", "bot"}, ok, `-owner "bot"`},
		{"missing file", []string{"-in", filepath.Join(dir, "nope.jsonl")}, "", "-in: open"},
		{"malformed line", nil, ok + "\n\n{\"id\":\"b\",", "line 3: malformed JSON"},
		{"unknown field", nil, `{"id":"a","at":"2026-11-30T10:00:00Z","chat":"group:1","from":"u1","txt":"hi"}`, `line 1: malformed JSON: json: unknown field "txt"`},
		{"unknown chat kind", nil, ok + "\n" + `{"id":"b","at":"2026-11-30T10:00:00Z","chat":"channel:1","from":"u1","text":"hi"}`,
			`line 2: message b: unknown chat kind "channel" in "channel:1" (want group:<id> or private:<id>)`},
		{"chat without id", nil, `{"id":"b","at":"2026-11-30T10:00:00Z","chat":"group","from":"u1","text":"hi"}`, `chat "group" is not group:<id> or private:<id>`},
		{"bad time", nil, `{"id":"b","at":"10:00","chat":"group:1","from":"u1","text":"hi"}`, `line 1: message b: "at" "10:00" is not an RFC 3339 time`},
		{"duplicate id", nil, ok + "\n" + ok, `line 2: duplicate id "a" (first on line 1)`},
		{"missing id", nil, `{"at":"2026-11-30T10:00:00Z","chat":"group:1","from":"u1","text":"hi"}`, `line 1: missing "id"`},
		{"empty message", nil, `{"id":"a","at":"2026-11-30T10:00:00Z","chat":"group:1","from":"u1"}`, `no "text" and no "media"`},
		{"private peer", nil, `{"id":"a","at":"2026-11-30T10:00:00Z","chat":"private:u2","from":"u1","text":"hi"}`, `the sender must be "u2"`},
		{"bad role", nil, `{"id":"a","at":"2026-11-30T10:00:00Z","chat":"group:1","from":"u1","text":"hi","role":"king"}`, `unknown role "king"`},
		{"bad media", nil, `{"id":"a","at":"2026-11-30T10:00:00Z","chat":"group:1","from":"u1","media":["gif"]}`, `unknown media "gif"`},
		{"empty input", nil, "\n\n", "the input has no messages"},
		{"config unknown field", []string{"-config", badConfig}, ok, `bad.json: json: unknown field "blocked"`},
		{"config chat level", []string{"-config", badLevel}, ok, `groups.5.proactive.chat_in "loud"`},
		{"config duration", []string{"-config", badDuration}, ok, `a duration must be a string`},
		{"config type", []string{"-config", badSyntax}, ok, `syntax.json: line 3: json: cannot unmarshal string`},
		{"config policy", []string{"-config", badPolicy}, ok, `unknown BotChat "sometimes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			err := run(t.Context(), tc.args, strings.NewReader(tc.stdin), &out, &errOut, noEnv)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.Empty(t, out.String(), "no output before the input is valid")
		})
	}
}

// TestUnresolvedQuote: a reply_to of a message outside the log is kept as
// an unresolved quote, with a note on stderr.
func TestUnresolvedQuote(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	in := `{"id":"a","at":"2026-11-30T10:00:00Z","chat":"group:1","from":"u1","text":"yes","reply_to":"zz"}`
	require.NoError(t, run(t.Context(), nil, strings.NewReader(in), &out, &errOut, noEnv))
	require.Contains(t, errOut.String(), `line 1: reply_to "zz" names no earlier message of group:1`)
	require.Contains(t, out.String(), `{"id":"a","outcome":"ignored_proactive_off"`)
}

func TestHelp(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"-h"}, strings.NewReader(""), &out, &errOut, noEnv))
	require.Contains(t, errOut.String(), "-alias")
}

// TestAliasModes: -alias-mode changes which alias hits are direct.
func TestAliasModes(t *testing.T) {
	t.Parallel()
	log := `{"id":"a","at":"2026-11-30T10:00:00Z","chat":"group:1","from":"u1","text":"oh nice, Mira recommended that"}
{"id":"b","at":"2026-11-30T10:00:10Z","chat":"group:1","from":"u2","text":"Mira, hi"}
{"id":"c","at":"2026-11-30T10:00:20Z","chat":"group:1","from":"u3","text":"my cat is called \"Mira\""}`
	for mode, want := range map[string][]string{
		"loose":  {replied, replied, replied},
		"smart":  {replied, replied, off},
		"strict": {off, replied, off},
	} {
		lines, _ := simulate(t, []string{"-alias", "mira", "-alias-mode", mode}, log, hooks{})
		var got []string
		for _, l := range lines {
			got = append(got, l.Outcome)
		}
		require.Equal(t, want, got, mode)
	}
}

// TestOutOfOrder: a line earlier than the one before it is still decided
// (the clock starts at the earliest time, so nothing is stale).
func TestOutOfOrder(t *testing.T) {
	t.Parallel()
	log := `{"id":"a","at":"2026-11-30T12:00:00Z","chat":"private:u1","from":"u1","text":"later"}
{"id":"b","at":"2026-11-30T09:00:00Z","chat":"private:u1","from":"u1","text":"earlier"}`
	lines, _ := simulate(t, nil, log, hooks{})
	require.Equal(t, replied, lines[0].Outcome)
	require.Equal(t, replied, lines[1].Outcome, lines[1].Reason)
}

// TestStoreRemoved: the throwaway store is gone after the run. Not
// parallel: it points TMPDIR at its own directory.
func TestStoreRemoved(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	simulate(t, nil, `{"id":"a","at":"2026-11-30T10:00:00Z","chat":"private:u1","from":"u1","text":"hi"}`, hooks{})
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// TestCancelled: a cancelled run ends with the context's error.
func TestCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, nil, strings.NewReader(`{"id":"a","at":"2026-11-30T10:00:00Z","chat":"private:u1","from":"u1","text":"hi"}`),
		&out, &errOut, noEnv)
	require.ErrorIs(t, err, context.Canceled)
}
