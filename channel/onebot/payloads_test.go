package onebot_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
)

// An HMAC-SHA1 vector derived for these tests (the OneBot v11 spec
// publishes none that can be checked) and verified with openssl.
const (
	hmacSecret = "some-secret"
	hmacBody   = `{"post_type":"meta_event","meta_event_type":"heartbeat","self_id":10001000,"time":1515204254}`
	hmacSig    = "sha1=193efaa25613ed55a86bf42430e36019d8251be1"
)

func TestSignatureVector(t *testing.T) {
	t.Parallel()
	require.Equal(t, hmacSig, onebot.Sign(hmacSecret, []byte(hmacBody)))
	require.True(t, onebot.VerifySignature(hmacSecret, []byte(hmacBody), hmacSig))
	require.True(t, onebot.VerifySignature(hmacSecret, []byte(hmacBody), "sha1=193EFAA25613ED55A86BF42430E36019D8251BE1"))
	require.False(t, onebot.VerifySignature("other-secret", []byte(hmacBody), hmacSig))
	require.False(t, onebot.VerifySignature(hmacSecret, []byte(hmacBody+" "), hmacSig))
	require.False(t, onebot.VerifySignature(hmacSecret, []byte(hmacBody), "193efaa25613ed55a86bf42430e36019d8251be1"))
	require.False(t, onebot.VerifySignature(hmacSecret, []byte(hmacBody), "sha1=zz"))
	// The spec's own sample signature has no published secret or body and
	// so cannot be checked here.
}

func post(t *testing.T, url, body string, hdr map[string]string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(tctx(t), http.MethodPost, url, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := ownClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// TestOfficialHTTPPost posts the spec's HTTP POST examples to the adapter's
// event receiver, signed with the vector's secret.
func TestOfficialHTTPPost(t *testing.T) {
	t.Parallel()
	r := httpRig(t, onebottest.Config{Secret: hmacSecret}, onebot.Config{Secret: hmacSecret})
	s := r.run(t)

	// The HMAC vector body is a heartbeat without status: accepted, no event.
	require.Equal(t, http.StatusNoContent, post(t, r.url, hmacBody, map[string]string{"X-Signature": hmacSig, "X-Self-ID": "10001000"}))

	// The official private message example (communication/http-post.md).
	official := `{"time":1515204254,"self_id":10001000,"post_type":"message","message_type":"private","sub_type":"friend",
 "message_id":12,"user_id":12345678,"message":"你好～","raw_message":"你好～","font":456,
 "sender":{"nickname":"小不点","sex":"male","age":18}}`
	require.Equal(t, http.StatusNoContent, post(t, r.url, official, map[string]string{"X-Signature": onebot.Sign(hmacSecret, []byte(official)), "X-Self-ID": "10001000"}))
	ev := s.waitMessage(t, "12")
	require.NoError(t, ev.Validate())
	require.Equal(t, channel.Event{
		Platform: "onebot", BotID: "10001000", Kind: channel.KindMessage,
		Chat:      channel.Chat{Kind: channel.Private, ID: "12345678"},
		MessageID: "12", Time: time.Unix(1515204254, 0),
		Sender:   channel.Sender{ID: "12345678", Name: "小不点"},
		Segments: []channel.Segment{channel.Text("你好～")},
		Source:   channel.SourceLive, Raw: ev.Raw,
	}, ev)
	require.JSONEq(t, official, string(ev.Raw))
	require.Equal(t, "onebot/10001000/private:12345678/12", ev.Key())
}

// TestEventNormalisation pushes payloads in the shapes of the spec and of
// NapCat/go-cqhttp over a WebSocket and checks the normalised events.
func TestEventNormalisation(t *testing.T) {
	t.Parallel()
	r := reverseRig(t, onebottest.Config{}, onebot.Config{})
	s := r.run(t)
	ctx := tctx(t)
	g := channel.Chat{Kind: channel.Group, ID: "100200300"}
	p := func(id string) channel.Chat { return channel.Chat{Kind: channel.Private, ID: id} }

	cases := []struct {
		name    string
		payload string
		check   func(t *testing.T, ev channel.Event)
	}{
		{"GroupArray", `{"time":1700000000,"self_id":10001000,"post_type":"message","message_type":"group","sub_type":"normal",
			"message_id":-2147,"message_seq":77,"group_id":100200300,"user_id":4242,"anonymous":null,
			"message":[{"type":"reply","data":{"id":"555"}},{"type":"at","data":{"qq":"10001000"}},{"type":"text","data":{"text":" hi"}},{"type":"face","data":{"id":"178"}}],
			"raw_message":"ignored","font":0,"sender":{"user_id":4242,"nickname":"alice","card":"","sex":"female","age":0,"area":"","level":"7","role":"owner","title":""}}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, channel.KindMessage, ev.Kind)
				require.Equal(t, g, ev.Chat)
				require.Equal(t, "-2147", ev.MessageID)
				require.Equal(t, int64(77), ev.Seq)
				require.Equal(t, time.Unix(1700000000, 0), ev.Time)
				require.Equal(t, channel.Sender{ID: "4242", Name: "alice", Role: channel.RoleOwner, Level: 7, LevelKnown: true}, ev.Sender)
				require.Equal(t, []channel.Segment{channel.Quote("555"), channel.Mention("10001000"), channel.Text(" hi"), {Type: channel.SegFace, FaceID: "178"}}, ev.Segments)
				require.True(t, ev.ToMe)
				require.Equal(t, "555", ev.QuoteID())
				require.Nil(t, ev.Quoted, "555 was never seen")
			}},
		{"GroupCQString", `{"time":1700000001,"self_id":10001000,"post_type":"message","message_type":"group","sub_type":"normal",
			"message_id":901,"group_id":100200300,"user_id":4243,"message":"[CQ:at,qq=4242] &#91;hi&#93; &amp; [CQ:image,file=abc.image,url=https://img.example/a.png]",
			"sender":{"user_id":4243,"nickname":"bob","card":"Bobby","role":"member","level":12}}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, channel.Sender{ID: "4243", Name: "Bobby", Role: channel.RoleMember, Level: 12, LevelKnown: true}, ev.Sender)
				require.Equal(t, []channel.Segment{
					channel.Mention("4242"), channel.Text(" [hi] & "),
					channel.Image(channel.Media{URL: "https://img.example/a.png", FileID: "abc.image", Name: "abc.image"}),
				}, ev.Segments)
				require.False(t, ev.ToMe)
				require.Zero(t, ev.Seq)
			}},
		{"RawMessageOnly", `{"time":1700000001,"self_id":10001000,"post_type":"message","message_type":"group","message_id":902,"group_id":100200300,"user_id":4243,"raw_message":"[CQ:face,id=1]x","sender":{"nickname":"bob"}}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, []channel.Segment{{Type: channel.SegFace, FaceID: "1"}, channel.Text("x")}, ev.Segments)
				require.False(t, ev.Sender.LevelKnown)
			}},
		{"Anonymous", `{"time":1700000002,"self_id":10001000,"post_type":"message","message_type":"group","sub_type":"anonymous",
			"message_id":903,"group_id":100200300,"user_id":80000000,"anonymous":{"id":123,"name":"匿名者","flag":"f"},
			"message":[{"type":"text","data":{"text":"boo"}}],"sender":{"user_id":80000000,"nickname":"匿名消息"}}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, "匿名者", ev.Sender.Name)
				require.Equal(t, "80000000", ev.Sender.ID)
			}},
		{"Media", `{"time":1700000003,"self_id":10001000,"post_type":"message","message_type":"private","sub_type":"friend","message_id":904,"user_id":4242,
			"message":[{"type":"record","data":{"file":"v.amr","url":"https://v.example/v.amr"}},{"type":"video","data":{"file":"https://v.example/m.mp4"}},
			{"type":"file","data":{"file":"doc.pdf","file_id":"/abc","file_size":"2048","url":"https://f.example/doc.pdf"}},
			{"type":"forward","data":{"id":"fw1"}},{"type":"share","data":{"url":"https://a.example","title":"A"}},{"type":"json","data":{"data":"{}"}},
			{"type":"mface","data":{"url":"https://m.example/x.gif","summary":"[x]"}}],"sender":{"user_id":4242,"nickname":"alice"}}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, p("4242"), ev.Chat)
				require.Equal(t, []channel.Segment{
					{Type: channel.SegVoice, Media: &channel.Media{URL: "https://v.example/v.amr", FileID: "v.amr", Name: "v.amr"}},
					{Type: channel.SegVideo, Media: &channel.Media{URL: "https://v.example/m.mp4"}},
					{Type: channel.SegFile, Media: &channel.Media{URL: "https://f.example/doc.pdf", FileID: "/abc", Name: "doc.pdf", Size: 2048}},
					{Type: channel.SegForward, MessageID: "fw1"},
					{Type: channel.SegLink, URL: "https://a.example", Text: "A"},
					{Type: channel.SegSticker, Media: &channel.Media{URL: "https://m.example/x.gif", Name: "[x]"}},
				}, ev.Segments)
				require.True(t, ev.MediaOnly())
			}},
		{"SelfSentGroup", `{"time":1700000004,"self_id":10001000,"post_type":"message_sent","message_type":"group","sub_type":"normal","message_id":905,"message_seq":78,"group_id":100200300,"user_id":10001000,"message":[{"type":"text","data":{"text":"我说的"}}],"sender":{"user_id":10001000,"nickname":"bot"}}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, channel.KindSelf, ev.Kind)
				require.Equal(t, g, ev.Chat)
				require.Equal(t, int64(78), ev.Seq)
			}},
		{"SelfByUserID", `{"time":1700000005,"self_id":10001000,"post_type":"message","message_type":"group","message_id":906,"group_id":100200300,"user_id":10001000,"message":"echo"}`,
			func(t *testing.T, ev channel.Event) { require.Equal(t, channel.KindSelf, ev.Kind) }},
		{"SelfSentPrivate", `{"time":1700000006,"self_id":10001000,"post_type":"message_sent","message_type":"private","sub_type":"friend","message_id":907,"user_id":10001000,"target_id":4242,"message":"hi alice"}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, channel.KindSelf, ev.Kind)
				require.Equal(t, p("4242"), ev.Chat)
			}},
		{"GroupRecall", `{"time":1700000007,"self_id":10001000,"post_type":"notice","notice_type":"group_recall","group_id":100200300,"user_id":4242,"operator_id":4243,"message_id":901}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, channel.KindNotice, ev.Kind)
				require.Equal(t, g, ev.Chat)
				require.Empty(t, ev.MessageID, "a notice has no message id of its own")
				require.Equal(t, &channel.Notice{Type: channel.NoticeGroupRecall, Operator: "4243", UserID: "4242", TargetMessageID: "901"}, ev.Notice)
			}},
		{"FriendRecall", `{"time":1700000008,"self_id":10001000,"post_type":"notice","notice_type":"friend_recall","user_id":4242,"message_id":904}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, p("4242"), ev.Chat)
				require.Equal(t, &channel.Notice{Type: channel.NoticeFriendRecall, Operator: "4242", UserID: "4242", TargetMessageID: "904"}, ev.Notice)
			}},
		{"PokeGroup", `{"time":1700000009,"self_id":10001000,"post_type":"notice","notice_type":"notify","sub_type":"poke","group_id":100200300,"user_id":4242,"target_id":10001000}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, g, ev.Chat)
				require.True(t, ev.ToMe)
				require.Equal(t, &channel.Notice{Type: channel.NoticePoke, Operator: "4242", UserID: "10001000"}, ev.Notice)
			}},
		{"PokePrivate", `{"time":1700000010,"self_id":10001000,"post_type":"notice","notice_type":"notify","sub_type":"poke","user_id":4242,"target_id":10001000}`,
			func(t *testing.T, ev channel.Event) { require.Equal(t, p("4242"), ev.Chat) }},
		{"GroupIncrease", `{"time":1700000011,"self_id":10001000,"post_type":"notice","notice_type":"group_increase","sub_type":"approve","group_id":100200300,"operator_id":4243,"user_id":5555}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, &channel.Notice{Type: channel.NoticeGroupIncrease, Operator: "4243", UserID: "5555"}, ev.Notice)
			}},
		{"FriendRequest", `{"time":1700000013,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":6667,"comment":"加我","flag":"flag-6667"}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, p("6667"), ev.Chat)
				require.Equal(t, channel.Sender{ID: "6667"}, ev.Sender)
				require.Equal(t, &channel.Notice{Type: channel.NoticeFriendRequest, Operator: "6667", UserID: "6667", Flag: "flag-6667", Comment: "加我"}, ev.Notice)
			}},
		{"FriendAdd", `{"time":1700000012,"self_id":10001000,"post_type":"notice","notice_type":"friend_add","user_id":6666}`,
			func(t *testing.T, ev channel.Event) {
				require.Equal(t, p("6666"), ev.Chat)
				require.Equal(t, &channel.Notice{Type: channel.NoticeFriendAdd, UserID: "6666"}, ev.Notice)
			}},
	}
	// Payloads that produce no event: each is followed by a marker message,
	// and nothing may arrive before the marker.
	silent := []string{
		`{"time":1,"self_id":10001000,"post_type":"request","request_type":"group","sub_type":"add","group_id":1,"user_id":1,"comment":"hi","flag":"f"}`,
		`{"time":1,"self_id":10001000,"post_type":"notice","notice_type":"group_upload","group_id":1,"user_id":1,"file":{"id":"x"}}`,
		`{"time":1,"self_id":10001000,"post_type":"notice","notice_type":"notify","sub_type":"honor","group_id":1,"user_id":1,"honor_type":"talkative"}`,
		`{"time":1,"self_id":10001000,"post_type":"meta_event","meta_event_type":"lifecycle","sub_type":"connect"}`,
		`{"time":1,"self_id":10001000,"post_type":"wat"}`,
		`{"time":1,"self_id":10001000,"post_type":"message","message_type":"channel","message_id":1,"user_id":1}`,
	}
	for _, tc := range cases {
		n := len(s.Events())
		require.NoError(t, r.fake.PushRaw(ctx, []byte(tc.payload)), tc.name)
		s.wait(t, tc.name, func(evs []channel.Event, _ []channel.State) bool { return len(evs) > n })
		evs := s.Events()
		ev := evs[n]
		require.NoError(t, ev.Validate(), tc.name)
		require.Equal(t, "onebot", ev.Platform, tc.name)
		require.Equal(t, "10001000", ev.BotID, tc.name)
		require.Equal(t, channel.SourceLive, ev.Source, tc.name)
		t.Run(tc.name, func(t *testing.T) { tc.check(t, ev) })
	}
	n := len(s.Events())
	for _, p := range silent {
		require.NoError(t, r.fake.PushRaw(ctx, []byte(p)))
	}
	marker, err := r.fake.EmitMessage(ctx, onebottest.Incoming{GroupID: 100200300, UserID: 4242, Message: onebot.Message{text("marker")}})
	require.NoError(t, err)
	s.waitMessage(t, itoa(int64(marker.ID)))
	evs := s.Events()
	require.Len(t, evs, n+1, "only the marker arrives after the silent payloads")
	require.NotEmpty(t, r.logs.all("unknown_event"))
	require.NotEmpty(t, r.logs.all("invalid_event"))
}

// ownClient has a transport of its own: an httptest.Server's Close (in a
// parallel test) closes http.DefaultTransport's idle connections, which can
// break a request that was about to use one.
var ownClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
