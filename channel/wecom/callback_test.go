package wecom_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/wecom"
	"github.com/personakit/persona/channel/wecom/wecomtest"
	"github.com/personakit/persona/clock"
)

// do sends a request to the adapter's handler and returns the answer.
func do(t *testing.T, h http.Handler, method, target string, body []byte) (int, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, target, bytes.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// TestOfficialVectorThroughTheHandler posts the official DecryptMsg
// vector (see crypto_test.go) as WeCom would and gets the text message it
// holds; the URL verification vector is answered with its plaintext.
func TestOfficialVectorThroughTheHandler(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1409659813, 0))
	log, buf := newLogger()
	ch, err := wecom.New(wecom.Config{Mode: wecom.ModeApp, Token: vecToken, EncodingAESKey: vecAESKey,
		CorpID: vecCorpID, AgentID: 218, Secret: "s", APIBase: "http://127.0.0.1:1", Clock: clk, Logger: log})
	require.NoError(t, err)

	q := url.Values{"msg_signature": {vecURLSig}, "timestamp": {vecURLTS}, "nonce": {vecURLNonce}, "echostr": {vecEchoStr}}
	status, body := do(t, ch, http.MethodGet, "/wecom?"+q.Encode(), nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "1616140317555161061", body, "the plaintext, no quotes, no newline")

	sink := newRecSink()
	run(t, ch, sink)
	waitLog(t, buf, "wecom_token_failed") // no API to reach, but callbacks are served
	q = url.Values{"msg_signature": {vecMsgSig}, "timestamp": {vecMsgTS}, "nonce": {vecMsgNonce}}
	env := "<xml><ToUserName><![CDATA[wx5823bf96d3bd56c7]]></ToUserName><Encrypt><![CDATA[" + vecEncrypt +
		"]]></Encrypt><AgentID><![CDATA[218]]></AgentID></xml>"
	status, body = do(t, ch, http.MethodPost, "/wecom?"+q.Encode(), []byte(env))
	require.Equal(t, http.StatusOK, status, body)
	require.Empty(t, body, "an app callback is answered with an empty body")
	ev := sink.waitEvents(t, 1)[0]
	require.NoError(t, ev.Validate())
	require.Equal(t, channel.Event{
		Platform: wecom.Platform, BotID: "218", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: channel.Private, ID: "mycreate"}, MessageID: "4561255354251345929",
		Time: time.Unix(1409659813, 0), Sender: channel.Sender{ID: "mycreate"},
		Segments: []channel.Segment{channel.Text("hello")}, ToMe: true, Source: channel.SourceLive, Raw: ev.Raw,
	}, ev)
	var raw string
	require.NoError(t, json.Unmarshal(ev.Raw, &raw))
	require.Equal(t, vecMsgXML, raw)
	require.NotContains(t, buf.String(), vecAESKey)
	require.NotContains(t, buf.String(), vecToken+"&")
}

// TestCallbackRefusesBadRequests: every tampered, replayed or malformed
// callback is refused with the documented status, logged, and nothing
// reaches the sink.
func TestCallbackRefusesBadRequests(t *testing.T) {
	t.Parallel()
	for _, mode := range []wecomtest.Mode{wecomtest.ModeApp, wecomtest.ModeAIBot} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			log, buf := newLogger()
			e := newEnv(t, mode, func(c *wecomtest.Config) { c.Clock = clk }, func(c *wecom.Config) {
				c.Clock, c.Logger, c.MaxBodyBytes = clk, log, 64<<10
			})
			sink := newRecSink()
			post := func(q url.Values, body []byte) (int, string) {
				return do(t, e.ch, http.MethodPost, "/wecom?"+q.Encode(), body)
			}
			// Before Run: 503, WeCom retries.
			plain := validPlain(e.srv)
			q, body := e.srv.SealCallback(plain)
			status, _ := post(q, body)
			require.Equal(t, http.StatusServiceUnavailable, status)
			run(t, e.ch, sink)
			sink.waitOnline(t, true)

			other := wecomtest.New(wecomtest.Config{Mode: mode, Token: "otherTok", EncodingAESKey: strings.Repeat("A", 43),
				CorpID: "wwother000000000", Clock: clk})
			t.Cleanup(other.Close)
			wrongReceiver := wecomtest.New(wecomtest.Config{Mode: wecomtest.ModeApp, CorpID: "wwsomeoneelse0000", Clock: clk})
			t.Cleanup(wrongReceiver.Close)

			type tamper func(q url.Values, body []byte) (url.Values, []byte)
			cases := []struct {
				name   string
				tamper tamper
				status int
				reason string
			}{
				{"wrong signature", func(q url.Values, b []byte) (url.Values, []byte) {
					sig := []byte(q.Get("msg_signature"))
					sig[0] ^= 1
					q.Set("msg_signature", string(sig))
					return q, b
				}, http.StatusUnauthorized, "signature mismatch"},
				{"signature for another nonce", func(q url.Values, b []byte) (url.Values, []byte) {
					q.Set("nonce", q.Get("nonce")+"1")
					return q, b
				}, http.StatusUnauthorized, "signature mismatch"},
				{"other token and key", func(url.Values, []byte) (url.Values, []byte) {
					return other.SealCallback(plain)
				}, http.StatusUnauthorized, "signature mismatch"},
				{"replayed timestamp", func(url.Values, []byte) (url.Values, []byte) {
					q, b := e.srv.SealCallback(plain)
					clk.Advance(6 * time.Minute)
					return q, b
				}, http.StatusUnauthorized, "replayed callback"},
				{"timestamp from the future", func(q url.Values, b []byte) (url.Values, []byte) {
					ts := strconv.FormatInt(clk.Now().Add(10*time.Minute).Unix(), 10)
					enc := ciphertextOf(t, b)
					q.Set("timestamp", ts)
					q.Set("msg_signature", wecomtest.Sign(e.srv.Token(), ts, q.Get("nonce"), enc))
					return q, b
				}, http.StatusUnauthorized, "replayed callback"},
				{"no signature", func(q url.Values, b []byte) (url.Values, []byte) {
					q.Del("msg_signature")
					return q, b
				}, http.StatusBadRequest, "no msg_signature"},
				{"not an envelope", func(q url.Values, _ []byte) (url.Values, []byte) { return q, []byte("hello") }, http.StatusBadRequest, "malformed envelope"},
				{"empty ciphertext", func(q url.Values, _ []byte) (url.Values, []byte) {
					return q, []byte(`{"encrypt":""}`)
				}, http.StatusBadRequest, "malformed envelope"},
				{"body too large", func(q url.Values, _ []byte) (url.Values, []byte) {
					return q, bytes.Repeat([]byte("x"), 65<<10)
				}, http.StatusRequestEntityTooLarge, "body over"},
			}
			if mode == wecomtest.ModeApp {
				cases = append(cases, struct {
					name   string
					tamper tamper
					status int
					reason string
				}{"wrong receiver id", func(url.Values, []byte) (url.Values, []byte) {
					return wrongReceiver.SealCallback(plain)
				}, http.StatusForbidden, "wrong receiver id"})
			}
			for _, tc := range cases {
				q, body := e.srv.SealCallback(plain)
				q, body = tc.tamper(q, body)
				status, _ := post(q, body)
				require.Equal(t, tc.status, status, tc.name)
				require.Contains(t, buf.String(), tc.reason, tc.name)
			}

			// Ciphertexts that pass the signature but do not decrypt: a
			// truncated one and one with bad padding, signed with the
			// right token (as only a holder of the token could).
			q, body = e.srv.SealCallback(plain)
			enc := ciphertextOf(t, body)
			for name, bad := range map[string]string{
				"truncated":   enc[:len(enc)-44],
				"not base64":  enc[:len(enc)-3] + "!!!",
				"bad padding": flipLastBlock(t, enc),
			} {
				ts, nonce := q.Get("timestamp"), q.Get("nonce")
				q2 := url.Values{"msg_signature": {wecomtest.Sign(e.srv.Token(), ts, nonce, bad)}, "timestamp": {ts}, "nonce": {nonce}}
				b, _ := json.Marshal(map[string]string{"encrypt": bad})
				status, _ := post(q2, b)
				require.Equal(t, http.StatusForbidden, status, name)
			}
			waitLog(t, buf, "ciphertext does not decrypt")

			// Valid crypto around invalid plaintexts.
			for name, p := range map[string]string{
				"invalid UTF-8": "\xff\xfe<xml>",
				"not XML/JSON":  "<xml><unclosed>",
			} {
				if mode == wecomtest.ModeAIBot && name == "not XML/JSON" {
					p = `{"msgid": `
				}
				status, _, err := e.srv.PushRaw(t.Context(), []byte(p))
				require.NoError(t, err)
				require.Equal(t, http.StatusBadRequest, status, name)
			}
			status, _ = do(t, e.ch, http.MethodPut, "/wecom", nil)
			require.Equal(t, http.StatusMethodNotAllowed, status)

			require.Empty(t, sink.Received(), "nothing reached the sink")
			require.NotContains(t, buf.String(), e.srv.EncodingAESKey())

			// And a good one still goes through.
			q, body = e.srv.SealCallback(plain)
			status, _ = post(q, body)
			require.Equal(t, http.StatusOK, status)
			sink.waitEvents(t, 1)
		})
	}
}

// validPlain is a text message in the fake's mode.
func validPlain(srv *wecomtest.Server) []byte {
	if srv.Mode() == wecomtest.ModeApp {
		return []byte("<xml><ToUserName><![CDATA[" + srv.CorpID() + "]]></ToUserName><FromUserName><![CDATA[alice]]></FromUserName>" +
			"<CreateTime>1700000000</CreateTime><MsgType><![CDATA[text]]></MsgType><Content><![CDATA[hi]]></Content>" +
			"<MsgId>9001</MsgId><AgentID>" + itoa(srv.AgentID()) + "</AgentID></xml>")
	}
	b, _ := json.Marshal(map[string]any{"msgid": "m9001", "aibotid": srv.BotID(), "chattype": "single",
		"from": map[string]string{"userid": "alice"}, "msgtype": "text", "text": map[string]string{"content": "hi"}})
	return b
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// ciphertextOf extracts the ciphertext of a sealed body (XML or JSON).
func ciphertextOf(t *testing.T, body []byte) string {
	t.Helper()
	s := string(body)
	if i := strings.Index(s, "<Encrypt><![CDATA["); i >= 0 {
		s = s[i+len("<Encrypt><![CDATA["):]
		return s[:strings.Index(s, "]]>")]
	}
	var j struct {
		Encrypt string `json:"encrypt"`
	}
	require.NoError(t, json.Unmarshal(body, &j))
	return j.Encrypt
}

// flipLastBlock changes the last ciphertext block, which garbles the
// padding.
func flipLastBlock(t *testing.T, enc string) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(enc)
	require.NoError(t, err)
	raw[len(raw)-1] ^= 0x5a
	raw[len(raw)-9] ^= 0x33
	return base64.StdEncoding.EncodeToString(raw)
}

// TestURLVerification answers the GET WeCom sends when the URL is saved.
func TestURLVerification(t *testing.T) {
	t.Parallel()
	for _, mode := range []wecomtest.Mode{wecomtest.ModeApp, wecomtest.ModeAIBot} {
		e := newEnv(t, mode, nil, nil)
		q := e.srv.VerifyQuery("8873467436482364")
		status, body := do(t, e.ch, http.MethodGet, "/?"+q.Encode(), nil)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "8873467436482364", body)
		q.Set("msg_signature", strings.Repeat("0", 40))
		status, _ = do(t, e.ch, http.MethodGet, "/?"+q.Encode(), nil)
		require.Equal(t, http.StatusUnauthorized, status)
		q.Del("echostr")
		status, _ = do(t, e.ch, http.MethodGet, "/?"+q.Encode(), nil)
		require.Equal(t, http.StatusBadRequest, status)
	}
	ws := newEnv(t, wecomtest.ModeAIBotWS, nil, nil)
	status, _ := do(t, ws.ch, http.MethodGet, "/", nil)
	require.Equal(t, http.StatusNotFound, status, "the long connection has no callback URL")
}
