package eventcenter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/eventcenter"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, clock.NewFake(t0), eventcenter.Config{})
	cases := []struct {
		name string
		cfg  eventcenter.Config
		want string
	}{
		{"no records", eventcenter.Config{Token: testToken}, "Records is required"},
		{"no token", eventcenter.Config{Records: e.db}, "at least 16 characters"},
		{"short token", eventcenter.Config{Records: e.db, Token: "fifteen-chars-x"}, "it has 15"},
		{"negative poll", eventcenter.Config{Records: e.db, Token: testToken, Poll: -time.Second}, "must not be negative"},
	}
	for _, tc := range cases {
		c, err := eventcenter.New(tc.cfg)
		require.ErrorContains(t, err, tc.want, tc.name)
		require.Nil(t, c)
	}
	c, err := eventcenter.New(eventcenter.Config{Records: e.db, Token: "sixteen-chars-xx"})
	require.NoError(t, err)
	require.NotNil(t, c)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{SessionTTL: time.Hour})
	id := e.record(event(channel.Group, "g", "1", t0, "secret plans"), inbound.Outcome{Code: outcome.Replied})

	paths := []string{"api/messages", "api/messages/" + url.PathEscape(id), "api/summary", "api/codes",
		"api/events", "api/unknown"}
	sameLength := strings.Repeat("x", len(testToken))
	for _, p := range paths {
		for _, tc := range []struct {
			name, header string
			invalid      bool
		}{
			{"missing", "", false},
			{"wrong", "Bearer " + sameLength, true},
			{"wrong length", "Bearer short", true},
			{"longer", "Bearer " + testToken + "x", true},
			{"prefix", "Bearer " + testToken[:len(testToken)-1], true},
			{"other scheme", "Basic " + testToken, false},
			{"empty bearer", "Bearer ", true},
		} {
			var resp *http.Response
			if tc.header == "" {
				resp = e.request(http.MethodGet, p, "")
			} else {
				resp = e.request(http.MethodGet, p, "", "Authorization", tc.header)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %s", p, tc.name)
			require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer realm=", "%s %s", p, tc.name)
			require.Equal(t, tc.invalid, strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token"),
				"%s %s", p, tc.name)
			require.NotContains(t, string(b), "secret plans")
			require.Contains(t, string(b), `"error"`)
			requireSecurityHeaders(t, resp)
		}
	}
	// The right token opens every path (the live feed answers 200 and
	// streams; the request ends with the test).
	for _, p := range paths {
		want := http.StatusOK
		if p == "api/unknown" {
			want = http.StatusNotFound
		}
		ctx, cancel := context.WithCancel(t.Context())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+p, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "bearer "+testToken) // the scheme is case-insensitive
		resp, err := e.srv.Client().Do(req)
		require.NoError(t, err)
		require.Equal(t, want, resp.StatusCode, p)
		cancel()
		_ = resp.Body.Close()
	}

	// The page shell is served to anyone, without data.
	resp := e.request(http.MethodGet, "", "")
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	requireSecurityHeaders(t, resp)
	require.Contains(t, string(page), `id="token"`)
	require.NotContains(t, string(page), "secret plans")
	require.NotContains(t, string(page), testToken)
	for _, asset := range []string{"app.js", "app.css"} {
		resp := e.request(http.MethodGet, asset, "")
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, asset)
		require.NotEmpty(t, b)
		requireSecurityHeaders(t, resp)
	}
	require.NotContains(t, resp.Header.Get("Content-Security-Policy"), "unsafe-inline")

	// Wrong methods and unknown paths.
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodPost, "api/messages", http.StatusMethodNotAllowed},
		{http.MethodPut, "api/session", http.StatusMethodNotAllowed},
		{http.MethodPost, "", http.StatusMethodNotAllowed},
		{http.MethodGet, "nowhere", http.StatusNotFound},
	} {
		resp := e.request(tc.method, tc.path, testToken)
		_ = resp.Body.Close()
		require.Equal(t, tc.want, resp.StatusCode, "%s %s", tc.method, tc.path)
	}
}

func TestSessionCookie(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{SessionTTL: 10 * time.Minute})
	e.record(event(channel.Group, "g", "1", t0, "hi"), inbound.Outcome{Code: outcome.Replied})

	// Only the bearer token buys a cookie.
	for _, tok := range []string{"", "wrong-token-wrong-token"} {
		resp := e.request(http.MethodPost, "api/session", tok)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Empty(t, resp.Cookies())
	}
	resp := e.request(http.MethodPost, "api/session", testToken)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	ck := resp.Cookies()[0]
	require.Equal(t, eventcenter.CookieName, ck.Name)
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.Equal(t, 600, ck.MaxAge)
	require.Empty(t, ck.Path, "scoped by the browser to the API's directory, wherever it is mounted")
	require.NotContains(t, ck.Value, testToken)
	raw := resp.Header.Get("Set-Cookie")
	require.Contains(t, raw, "HttpOnly")
	require.Contains(t, raw, "SameSite=Strict")

	withCookie := func(path, value string, more ...string) int {
		resp := e.request(http.MethodGet, path, "", append([]string{"Cookie", eventcenter.CookieName + "=" + value}, more...)...)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, withCookie("api/messages", ck.Value))
	require.Equal(t, http.StatusUnauthorized, withCookie("api/messages", ck.Value+"x"))
	require.Equal(t, http.StatusUnauthorized, withCookie("api/messages", ck.Value, "Authorization", "Bearer nope"),
		"a wrong bearer token is refused even beside a good cookie")
	// A cookie cannot buy another cookie.
	resp = e.request(http.MethodPost, "api/session", "", "Cookie", eventcenter.CookieName+"="+ck.Value)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// It expires.
	clk.Advance(9 * time.Minute)
	require.Equal(t, http.StatusOK, withCookie("api/summary", ck.Value))
	clk.Advance(time.Minute)
	require.Equal(t, http.StatusUnauthorized, withCookie("api/summary", ck.Value))

	// Signing out ends it.
	resp = e.request(http.MethodPost, "api/session", testToken)
	_ = resp.Body.Close()
	ck = resp.Cookies()[0]
	require.Equal(t, http.StatusOK, withCookie("api/codes", ck.Value))
	resp = e.request(http.MethodDelete, "api/session", "", "Cookie", eventcenter.CookieName+"="+ck.Value)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, http.StatusUnauthorized, withCookie("api/codes", ck.Value))
}

func TestMessagesAPI(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{Secrets: []string{"sk-live-123"}})
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	a1 := event(channel.Group, "a", "1", at(1), "Hello World")
	a2 := event(channel.Group, "a", "2", at(2), "my key is sk-live-123, keep it")
	b3 := event(channel.Group, "b", "3", at(3), "<img src=x onerror=alert(1)>")
	b3.Sender.ID = a1.Sender.ID
	p4 := event(channel.Private, "p", "4", at(4), strings.Repeat("long ", 100))
	e.complete(a1, inbound.Outcome{Code: outcome.Replied, Reason: "mention", Kind: "chat"})
	e.record(a2, inbound.Outcome{Code: inbound.IgnoredStale, Reason: "old; key sk-live-123"})
	e.complete(b3, inbound.Outcome{Code: "ignored_sampled_out"})
	_, err := e.db.Enqueue(t.Context(), inbound.Item{Event: p4})
	require.NoError(t, err)

	var page eventcenter.MessagePage
	e.getJSON("api/messages", http.StatusOK, &page)
	require.Equal(t, keys(p4, b3, a2, a1), ids(page.Messages))
	require.Empty(t, page.Next)
	m := page.Messages[3]
	require.Equal(t, "Hello World", m.Text)
	require.Equal(t, "group:a", m.Chat)
	require.Equal(t, a1.SessionKey, m.Session)
	require.Equal(t, a1.Sender.ID, m.Sender)
	require.Equal(t, outcome.Replied, m.Code)
	require.Equal(t, eventcenter.FamilyReplied, m.Family)
	require.Equal(t, "mention", m.Reason)
	require.Equal(t, "done", m.Status)
	require.True(t, at(1).Equal(m.Time))
	require.NotNil(t, m.CompletedAt)
	require.Equal(t, "my key is ***, keep it", page.Messages[2].Text, "secrets are masked")
	require.Equal(t, "old; key ***", page.Messages[2].Reason)
	require.Equal(t, "<img src=x onerror=alert(1)>", page.Messages[1].Text, "JSON carries the text as it is")
	require.Equal(t, eventcenter.FamilyIgnored, page.Messages[1].Family)
	require.Equal(t, "pending", page.Messages[0].Status)
	require.Empty(t, page.Messages[0].Code)
	require.True(t, page.Messages[0].Truncated)
	require.Equal(t, eventcenter.ListTextRunes+1, len([]rune(page.Messages[0].Text)))

	list := func(query string) []string {
		t.Helper()
		var p eventcenter.MessagePage
		e.getJSON("api/messages?"+query, http.StatusOK, &p)
		return ids(p.Messages)
	}
	q := url.Values{}
	require.Equal(t, keys(b3, a1), list("sender="+url.QueryEscape(a1.Sender.ID)))
	require.Equal(t, keys(a2, a1), list("session="+url.QueryEscape(a1.SessionKey)))
	require.Equal(t, keys(a1), list("code=replied"))
	require.Equal(t, keys(a2), list("code=ignored_stale"))
	require.Equal(t, keys(a1), list("text=WORLD"))
	require.Equal(t, keys(b3), list("text="+url.QueryEscape("<IMG")))
	require.Equal(t, keys(p4), list("status=pending"))
	require.Equal(t, keys(b3, a2, a1), list("status=done"))
	q.Set("since", at(2).Format(time.RFC3339))
	q.Set("until", strconv.FormatInt(at(4).UnixMilli(), 10))
	require.Equal(t, keys(b3, a2), list(q.Encode()))
	require.Equal(t, keys(a1), list("code=replied&session="+url.QueryEscape(a1.SessionKey)+"&text=hello&status=done"))
	require.Empty(t, list("text=nothing"))

	// Paging.
	var got []string
	next := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		var p eventcenter.MessagePage
		e.getJSON("api/messages?limit=3&before="+url.QueryEscape(next), http.StatusOK, &p)
		got = append(got, ids(p.Messages)...)
		if p.Next == "" {
			break
		}
		next = p.Next
	}
	require.Equal(t, keys(p4, b3, a2, a1), got)

	// Bad parameters.
	for _, bad := range []string{"code=Not-A-Code", "since=yesterday", "until=12:00", "limit=0", "limit=501",
		"limit=x", "status=sleeping", "before=" + url.QueryEscape("!!!"), "since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z",
		"text=" + strings.Repeat("x", 600)} {
		var body struct{ Error string }
		e.getJSON("api/messages?"+bad, http.StatusBadRequest, &body)
		require.NotEmpty(t, body.Error, bad)
	}
}

func TestTrail(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{Secrets: []string{"hunter2"}}, withLedger)
	ctx := t.Context()
	e.center.Wake() // harmless without feeds

	ev := event(channel.Group, "g%2Fx", "7/8", t0, "what is the password? hunter2")
	ev.Raw = []byte(`{"raw_marker":"do-not-show"}`)
	_, err := e.db.Enqueue(ctx, inbound.Item{Event: ev, Priority: inbound.PriorityDirect})
	require.NoError(t, err)
	// A first attempt fails.
	clk.Advance(time.Second)
	ls, err := e.db.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.NoError(t, e.db.Retry(ctx, ls[0], time.Time{}, errors.New("model said hunter2 and timed out")))
	clk.Advance(time.Second)
	ls, err = e.db.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	id := ls[0].ID
	require.NoError(t, e.db.MarkIntent(ctx, id, 0, "fp0"))
	require.NoError(t, e.db.MarkSent(ctx, id, 0, []string{"900", "901"}, t0.Add(5*time.Second)))
	require.NoError(t, e.db.MarkIntent(ctx, id, 1, "fp1"))
	clk.Advance(5 * time.Second)
	trail := &inbound.Trail{
		Trigger: "mention", Gates: []string{"bot_enabled", "group_enabled"}, Command: "",
		Router: &inbound.RouterTrail{Directed: "yes", ChatIn: 0.75, Reply: true, Code: "router_ok", Reason: "asked hunter2"},
		Review: []inbound.ReviewStep{{Generation: 1, Send: false, Code: "ignored_duplicate_reply", Reason: "dup", Rewritten: true},
			{Generation: 2, Send: true, Reason: "fine"}},
		Notes: []string{"link already read", "note with hunter2"},
	}
	require.NoError(t, e.db.Complete(ctx, ls[0], inbound.Outcome{
		Code: outcome.Replied, Reason: "mention answered", Stage: inbound.StageAcknowledged,
		OutboundIDs: []string{"900", "901"}, Kind: "chat", Trail: trail,
		Timings: inbound.Timings{GatesDone: t0.Add(2100 * time.Millisecond), GenerationStart: t0.Add(2200 * time.Millisecond),
			GenerationEnd: t0.Add(4 * time.Second), FirstSend: t0.Add(4500 * time.Millisecond), FirstAck: t0.Add(5 * time.Second)},
		Tokens: []inbound.Tokens{{Purpose: "reply", Model: "m1", Input: 1000, CachedInput: 750, Output: 50},
			{Purpose: "router", Model: "m0", Input: 0, Output: 3}},
	}))

	var d eventcenter.Detail
	raw := e.getJSON("api/messages/"+url.PathEscape(id), http.StatusOK, &d)
	require.NotContains(t, raw, "hunter2", "secrets are masked everywhere")
	require.NotContains(t, raw, "do-not-show", "the raw payload is never shown")
	require.NotContains(t, raw, "raw_marker")
	require.NotContains(t, raw, testToken)
	require.Equal(t, id, d.ID)
	require.Equal(t, "what is the password? ***", d.Text)
	require.Equal(t, outcome.Replied, d.Code)
	require.Equal(t, "a direct trigger was answered", d.Meaning)
	require.Equal(t, "mention answered", d.Reason)
	require.Equal(t, inbound.PriorityDirect, d.Priority)
	require.Equal(t, 2, d.Attempts)
	require.Equal(t, "model said *** and timed out", d.LastError)
	require.True(t, t0.Equal(d.EnqueuedAt))
	require.NotNil(t, d.Trail)
	require.Equal(t, "mention", d.Trail.Trigger)
	require.Equal(t, []string{"bot_enabled", "group_enabled"}, d.Trail.Gates)
	require.Equal(t, "asked ***", d.Trail.Router.Reason)
	require.InDelta(t, 0.75, d.Trail.Router.ChatIn, 1e-9)
	require.Len(t, d.Trail.Review, 2)
	require.True(t, d.Trail.Review[0].Rewritten)
	require.Equal(t, []string{"link already read", "note with ***"}, d.Trail.Notes)
	require.Equal(t, "acknowledged", d.Delivery.Stage)
	require.Equal(t, []string{"900", "901"}, d.Delivery.OutboundIDs)
	require.Len(t, d.Delivery.Slots, 2)
	require.Equal(t, eventcenter.Slot{N: 0, State: "sent", MessageIDs: []string{"900", "901"},
		SentAt: ptr(t0.Add(5 * time.Second))}, d.Delivery.Slots[0])
	require.Equal(t, "intent", d.Delivery.Slots[1].State)
	require.NotNil(t, d.Delivery.Slots[1].IntentAt)
	var names []string
	for _, tm := range d.Timings {
		names = append(names, tm.Name)
	}
	require.Equal(t, []string{"enqueued", "first_claim", "gates_done", "generation_start", "generation_end",
		"first_send", "first_ack", "completed"}, names)
	require.Equal(t, int64(2100), d.Timings[2].AfterMs)
	require.Equal(t, "2.1s", d.Timings[2].After)
	require.Equal(t, int64(7000), d.Timings[7].AfterMs)
	require.Equal(t, []eventcenter.Tokens{
		{Purpose: "reply", Model: "m1", Input: 1000, CachedInput: 750, Output: 50, CachedShare: 0.75},
		{Purpose: "router", Model: "m0", Output: 3},
	}, d.Tokens)

	// An id with a literal %2F and slashes round-trips through the path.
	require.Contains(t, id, "%2F")
	require.Contains(t, id, "/")

	// Unknown ids.
	for _, p := range []string{"api/messages/nope", "api/messages/" + url.PathEscape(id+"x")} {
		var body struct{ Error string }
		e.getJSON(p, http.StatusNotFound, &body)
		require.Equal(t, "no such message", body.Error)
	}
	// A record without a trail or ledger rows.
	other := e.record(event(channel.Group, "g", "9", t0, "x"), inbound.Outcome{Code: "custom_thing"})
	d = eventcenter.Detail{}
	e.getJSON("api/messages/"+url.PathEscape(other), http.StatusOK, &d)
	require.Nil(t, d.Trail)
	require.Empty(t, d.Meaning, "a code persona does not declare")
	require.Equal(t, eventcenter.FamilyOther, d.Family)
	require.NotNil(t, d.Delivery.Slots)
	require.Empty(t, d.Delivery.Slots)
}

func ptr[T any](v T) *T { return &v }

// failingLedger fails every read.
type failingLedger struct{}

func (failingLedger) Slots(context.Context, string) ([]outbound.Slot, error) {
	return nil, errors.New("disk on fire")
}

func TestTrailLedgerFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, clock.NewFake(t0), eventcenter.Config{Ledger: failingLedger{}})
	id := e.record(event(channel.Group, "g", "1", t0, "x"), inbound.Outcome{Code: outcome.Replied})
	var d eventcenter.Detail
	raw := e.getJSON("api/messages/"+url.PathEscape(id), http.StatusOK, &d)
	require.Equal(t, id, d.ID, "the record is shown without its slots")
	require.NotEmpty(t, d.Delivery.SlotsError)
	require.NotContains(t, raw, "disk on fire", "internal errors are logged, not shown")
}

func TestSummaryAPI(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{})
	// Completed 25 hours ago: outside the default range.
	e.complete(event(channel.Group, "g", "0", t0, "x"), inbound.Outcome{Code: outcome.Replied,
		Tokens: []inbound.Tokens{{Purpose: "reply", Input: 999}}})
	clk.Advance(time.Hour)
	since := clk.Now()
	e.complete(event(channel.Group, "g", "1", t0, "x"), inbound.Outcome{Code: outcome.Replied,
		Tokens: []inbound.Tokens{{Purpose: "reply", Input: 100, CachedInput: 25, Output: 10}, {Purpose: "router", Input: 10}}})
	e.complete(event(channel.Group, "g", "2", t0, "x"), inbound.Outcome{Code: outcome.Replied,
		Tokens: []inbound.Tokens{{Purpose: "reply", Input: 300, CachedInput: 75, Output: 30}}})
	e.record(event(channel.Group, "g", "3", t0, "x"), inbound.Outcome{Code: inbound.IgnoredStale})
	e.record(event(channel.Group, "g", "4", t0, "x"), inbound.Outcome{Code: outcome.NoticePoke})
	_, err := e.db.Enqueue(t.Context(), inbound.Item{Event: event(channel.Group, "g", "5", t0, "x")})
	require.NoError(t, err)
	clk.Advance(24 * time.Hour)

	var s eventcenter.Summary
	e.getJSON("api/summary", http.StatusOK, &s)
	require.True(t, clk.Now().Equal(s.Until))
	require.True(t, clk.Now().Add(-24*time.Hour).Equal(s.Since))
	require.Equal(t, 4, s.Total)
	require.Equal(t, 1, s.Pending)
	require.Equal(t, []eventcenter.CodeCount{
		{Code: outcome.Replied, Family: "replied", Meaning: eventcenter.Meaning(outcome.Replied), Count: 2},
		{Code: inbound.IgnoredStale, Family: "ignored", Meaning: eventcenter.Meaning(inbound.IgnoredStale), Count: 1},
		{Code: outcome.NoticePoke, Family: "notice", Meaning: eventcenter.Meaning(outcome.NoticePoke), Count: 1},
	}, s.Outcomes)
	require.Equal(t, []eventcenter.Tokens{
		{Purpose: "reply", Calls: 2, Input: 400, CachedInput: 100, Output: 40, CachedShare: 0.25},
		{Purpose: "router", Calls: 1, Input: 10},
	}, s.Tokens)

	// An explicit range, in unix ms and RFC 3339.
	e.getJSON(fmt.Sprintf("api/summary?since=%d&until=%s", since.Add(-2*time.Hour).UnixMilli(),
		url.QueryEscape(since.Format(time.RFC3339))), http.StatusOK, &s)
	require.Equal(t, 1, s.Total)
	require.Equal(t, 999, s.Tokens[0].Input)

	for _, bad := range []string{"since=soon", "until=x", "since=2026-03-05T00:00:00Z&until=2026-03-01T00:00:00Z"} {
		var body struct{ Error string }
		e.getJSON("api/summary?"+bad, http.StatusBadRequest, &body)
		require.NotEmpty(t, body.Error)
	}
}

func TestCodesAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, clock.NewFake(t0), eventcenter.Config{})
	var got struct{ Codes []eventcenter.CodeInfo }
	e.getJSON("api/codes", http.StatusOK, &got)
	require.Equal(t, eventcenter.Codes(), got.Codes)
}
