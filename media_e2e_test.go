package persona

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// mediaModel is a model that records what it is asked: it describes
// pictures (PurposeVision) and answers chat turns, and declares vision
// when seeing is set.
type mediaModel struct {
	seeing bool
	mu     sync.Mutex
	reqs   []agent.Request
	// reply answers a chat request (default "nice").
	reply func(req agent.Request) string
}

func (m *mediaModel) AcceptsImages() bool { return m.seeing }

func (m *mediaModel) Generate(_ context.Context, req agent.Request) (*agent.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	switch req.Purpose {
	case agent.PurposeVision:
		return &agent.Response{Text: "a small red square", Model: "v"}, nil
	case agent.PurposeChat:
		text := "nice"
		if m.reply != nil {
			text = m.reply(req)
		}
		return &agent.Response{Text: text, Model: "c"}, nil
	}
	return nil, &agent.Error{Kind: agent.KindInvalidRequest, Message: "not in this test"}
}

// calls returns the requests of one purpose.
func (m *mediaModel) calls(purpose string) []agent.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []agent.Request
	for _, r := range m.reqs {
		if r.Purpose == purpose {
			out = append(out, r)
		}
	}
	return out
}

// current returns the current-message message of a chat request.
func current(t *testing.T, req agent.Request) agent.Message {
	t.Helper()
	for _, m := range req.Messages {
		if strings.HasPrefix(m.Content, "[current] ") {
			return m
		}
	}
	t.Fatalf("no current message in %+v", req.Messages)
	return agent.Message{}
}

// redPNG is a tiny valid PNG.
func redPNG(t testing.TB, side int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, side, side))
	for x := range side {
		for y := range side {
			img.Set(x, y, color.RGBA{R: 255, A: 255})
		}
	}
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	return b.Bytes()
}

// mediaRun is a pipeline on the OneBot fake with a fake clock.
type mediaRun struct {
	t     *testing.T
	clk   *clock.Fake
	fake  *onebottest.Server
	p     *Pipeline
	model *mediaModel
	mu    sync.Mutex
	outs  map[string]inbound.Outcome
}

const (
	mrBot   = 90001
	mrGroup = 777001
	mrUser  = 12345
)

func startMediaRun(t *testing.T, model *mediaModel, opt func(*Options)) *mediaRun {
	t.Helper()
	r := &mediaRun{t: t, model: model, outs: map[string]inbound.Outcome{},
		clk: clock.NewFake(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))}
	r.fake = onebottest.New(onebottest.Config{SelfID: mrBot, Nickname: "Mira", Clock: r.clk})
	t.Cleanup(r.fake.Close)
	r.fake.AddGroup(mrGroup, "photos")
	srv := httptest.NewServer(r.fake)
	t.Cleanup(srv.Close)
	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeForwardWS, URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/",
		Logger: slog.New(slog.DiscardHandler), Clock: r.clk})
	require.NoError(t, err)
	r.run(ch, opt)
	return r
}

// run starts the pipeline on ch (no router, no audit, the run's clock and
// model) until the test ends; opt changes the options first.
func (r *mediaRun) run(ch channel.Channel, opt func(*Options)) {
	t := r.t
	o := Options{Channels: []channel.Channel{ch}, DataDir: t.TempDir(), Persona: "You are Mira.", Model: r.model,
		Clock: r.clk, NoPacing: true, NoRouter: true, AuditDisabled: func(string) bool { return true },
		Logger: slog.New(slog.DiscardHandler),
		OnOutcome: func(id string, o inbound.Outcome) {
			r.mu.Lock()
			r.outs[id] = o
			r.mu.Unlock()
		}}
	if opt != nil {
		opt(&o)
	}
	p, err := New(o)
	require.NoError(t, err)
	r.p = p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, p.Close())
	})
	require.Eventually(t, p.anyReady, 10*time.Second, 5*time.Millisecond)
}

// emit sends a message from mrUser (group when group is set) and returns
// its queue item id.
func (r *mediaRun) emit(group bool, msg onebot.Message) string {
	r.t.Helper()
	in := onebottest.Incoming{UserID: mrUser, Nickname: "Ann", Message: msg}
	chat := channel.Chat{Kind: channel.Private, ID: strconv.Itoa(mrUser)}
	if group {
		in.GroupID = mrGroup
		chat = channel.Chat{Kind: channel.Group, ID: strconv.Itoa(mrGroup)}
	}
	rec, err := r.fake.EmitMessage(r.t.Context(), in)
	require.NoError(r.t, err)
	ev := channel.Event{Platform: onebot.DefaultPlatform, BotID: strconv.Itoa(mrBot), MessageID: strconv.Itoa(int(rec.ID)), Chat: chat}
	return ev.Key()
}

// await waits for an item's outcome. When the item waits in the queue for
// a time still to come (a held picture, a retry's backoff), the fake clock
// is moved there; otherwise it stays, so that no call deadline of the
// adapter (on the same clock) runs out under a slow test machine.
func (r *mediaRun) await(id string) inbound.Outcome {
	r.t.Helper()
	var o inbound.Outcome
	require.Eventually(r.t, func() bool {
		r.mu.Lock()
		got, ok := r.outs[id]
		r.mu.Unlock()
		if ok {
			o = got
			return true
		}
		rec, err := r.p.opt.Queue.Lookup(r.t.Context(), id)
		if now := r.clk.Now(); err == nil && rec.Status == inbound.StatusPending && rec.AvailableAt.After(now) {
			r.clk.Advance(rec.AvailableAt.Sub(now) + time.Millisecond)
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "no outcome for %s", id)
	return o
}

// queued waits until the pipeline has every item in its queue (an adapter
// hands messages over asynchronously).
func (r *mediaRun) queued(ids ...string) {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		for _, id := range ids {
			if _, err := r.p.opt.Queue.Lookup(r.t.Context(), id); err != nil {
				return false
			}
		}
		return true
	}, 20*time.Second, 5*time.Millisecond)
}

func (r *mediaRun) outcome(id string) (inbound.Outcome, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.outs[id]
	return o, ok
}

func imageSeg(file string) onebot.Segment {
	return onebot.Segment{Type: "image", Data: map[string]string{"file": file}}
}

func TestMediaImageOnlyPrivateMessageIsSeen(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startMediaRun(t, model, nil)
	pic := redPNG(t, 8)
	r.fake.AddMedia("abc.image", onebottest.MediaFile{Bytes: pic, Base64: true})

	id := r.emit(false, onebot.Message{imageSeg("abc.image")})
	o := r.await(id)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	chats := model.calls(agent.PurposeChat)
	require.Len(t, chats, 1)
	cur := current(t, chats[0])
	require.Len(t, cur.Parts, 1, "the picture is attached to the current message")
	require.True(t, strings.HasPrefix(cur.Parts[0].ImageURL, "data:image/png;base64,"), cur.Parts[0].ImageURL[:40])
	require.Contains(t, cur.Content, "[image]")

	// The description was written meanwhile and is stored with the
	// message: a later turn's history shows it as text.
	require.Eventually(t, func() bool { return len(model.calls(agent.PurposeVision)) == 1 }, 5*time.Second, 5*time.Millisecond)
	id2 := r.emit(false, onebot.Message{onebot.TextSegment("and now?")})
	require.Equal(t, outcome.Replied, r.await(id2).Code)
	chats = model.calls(agent.PurposeChat)
	require.Len(t, chats, 2)
	var hist strings.Builder
	for _, m := range chats[1].Messages {
		if m.Role == agent.RoleUser && !strings.HasPrefix(m.Content, "[current] ") {
			hist.WriteString(m.Content)
			require.Empty(t, m.Parts, "history carries descriptions, not bytes")
		}
	}
	require.Contains(t, hist.String(), "[image: a small red square]")
}

func TestMediaDescribedForATextOnlyChat(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startMediaRun(t, model, func(o *Options) { o.Media.DescribeOnly = true })
	r.fake.AddMedia("abc.image", onebottest.MediaFile{Bytes: redPNG(t, 8), Base64: true})

	id := r.emit(false, onebot.Message{imageSeg("abc.image"), onebot.TextSegment("what is this?")})
	require.Equal(t, outcome.Replied, r.await(id).Code)
	cur := current(t, model.calls(agent.PurposeChat)[0])
	require.Empty(t, cur.Parts)
	require.Contains(t, cur.Content, "[image: a small red square] what is this?")

	// The same picture again: described from the cache, not by a second
	// vision call.
	id2 := r.emit(false, onebot.Message{imageSeg("abc.image"), onebot.TextSegment("and this one?")})
	require.Equal(t, outcome.Replied, r.await(id2).Code)
	require.Len(t, model.calls(agent.PurposeVision), 1)
	require.Contains(t, current(t, model.calls(agent.PurposeChat)[1]).Content, "[image: a small red square] and this one?")
}

func TestMediaNoVisionShowsPlaceholders(t *testing.T) {
	t.Parallel()
	model := &mediaModel{}
	r := startMediaRun(t, model, nil)
	r.fake.AddMedia("abc.image", onebottest.MediaFile{Bytes: redPNG(t, 8), Base64: true})
	id := r.emit(false, onebot.Message{imageSeg("abc.image"), onebot.TextSegment("look")})
	require.Equal(t, outcome.Replied, r.await(id).Code)
	cur := current(t, model.calls(agent.PurposeChat)[0])
	require.Empty(t, cur.Parts)
	require.Contains(t, cur.Content, "[image] look")
	require.Empty(t, model.calls(agent.PurposeVision))
}

func TestMediaPhotoThenCaptionIsOneTurn(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startMediaRun(t, model, nil)
	r.fake.AddMedia("p1.image", onebottest.MediaFile{Bytes: redPNG(t, 8), Base64: true})

	photo := r.emit(false, onebot.Message{imageSeg("p1.image")})
	r.clk.Advance(3 * time.Second)
	caption := r.emit(false, onebot.Message{onebot.TextSegment("这张好看吗")})
	o := r.await(caption)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	po := r.await(photo)
	require.Equal(t, outcome.SupersededMediaTurn, po.Code, po.Reason)
	require.Equal(t, caption, po.MergedInto)

	chats := model.calls(agent.PurposeChat)
	require.Len(t, chats, 1, "one turn answers the photo and its caption")
	cur := current(t, chats[0])
	require.Len(t, cur.Parts, 1)
	require.Contains(t, cur.Content, "这张好看吗")
	require.Len(t, r.fake.Sent(), 1, "one reply")
}

func TestMediaPhotoAloneBecomesItsOwnTurn(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startMediaRun(t, model, nil)
	r.fake.AddMedia("p1.image", onebottest.MediaFile{Bytes: redPNG(t, 8), Base64: true})
	photo := r.emit(false, onebot.Message{imageSeg("p1.image")})
	// Held for the media window: nothing happens at once.
	time.Sleep(50 * time.Millisecond)
	_, done := r.outcome(photo)
	require.False(t, done, "a media-only message waits for a caption")
	r.clk.Advance(20 * time.Second) // past the window: a caption now is a turn of its own
	require.Equal(t, outcome.Replied, r.await(photo).Code)
	late := r.emit(false, onebot.Message{onebot.TextSegment("so?")})
	require.Equal(t, outcome.Replied, r.await(late).Code)
	chats := model.calls(agent.PurposeChat)
	require.Len(t, chats, 2)
	require.Len(t, current(t, chats[0]).Parts, 1)
	require.Empty(t, current(t, chats[1]).Parts)
}

func TestMediaQuotedImageIsAttached(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startMediaRun(t, model, nil)
	r.fake.AddMedia("q.image", onebottest.MediaFile{Bytes: redPNG(t, 8), Base64: true})
	// A picture in the group, not addressed to the bot (no router: ignored).
	in := onebottest.Incoming{UserID: 555, GroupID: mrGroup, Nickname: "Bo", Message: onebot.Message{imageSeg("q.image"), onebot.TextSegment("sunset")}}
	rec, err := r.fake.EmitMessage(t.Context(), in)
	require.NoError(t, err)
	// Someone quotes it and asks the bot.
	ask := r.emit(true, onebot.Message{{Type: "reply", Data: map[string]string{"id": strconv.Itoa(int(rec.ID))}},
		{Type: "at", Data: map[string]string{"qq": strconv.Itoa(mrBot)}}, onebot.TextSegment(" where is this?")})
	require.Equal(t, outcome.Replied, r.await(ask).Code)
	chats := model.calls(agent.PurposeChat)
	require.Len(t, chats, 1)
	var found bool
	for _, m := range chats[0].Messages {
		if strings.HasPrefix(m.Content, "[Images the current message refers to]") {
			require.Len(t, m.Parts, 1)
			found = true
		}
	}
	require.True(t, found, "the quoted picture is attached as a dependency image")
}

func TestMediaVoiceIsTranscribedAndAnswered(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	var mu sync.Mutex
	var heard []agent.Audio
	tr := agent.TranscriberFunc(func(_ context.Context, a agent.Audio) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, a)
		return "明天几点集合", nil
	})
	r := startMediaRun(t, model, func(o *Options) { o.Media.Transcriber = tr })
	// QQ keeps voice as SILK; the implementation converts to the asked format.
	mp3 := append([]byte("ID3\x03\x00\x00\x00\x00\x00\x00"), bytes.Repeat([]byte{0xff, 0xfb, 0x90, 0x00}, 64)...)
	r.fake.AddMedia("v1.amr", onebottest.MediaFile{Bytes: []byte("#!SILK_V3 not really"), Formats: map[string][]byte{"mp3": mp3}})
	id := r.emit(true, onebot.Message{{Type: "at", Data: map[string]string{"qq": strconv.Itoa(mrBot)}},
		{Type: "record", Data: map[string]string{"file": "v1.amr"}}})
	o := r.await(id)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	mu.Lock()
	require.Len(t, heard, 1)
	require.Equal(t, "audio/mpeg", heard[0].MIME)
	require.Equal(t, mp3, heard[0].Data)
	mu.Unlock()
	require.Contains(t, current(t, model.calls(agent.PurposeChat)[0]).Content, "明天几点集合")
}

func TestMediaVoiceNotTranscribedIsSaidInTheReason(t *testing.T) {
	t.Parallel()
	model := &mediaModel{}
	tr := agent.TranscriberFunc(func(context.Context, agent.Audio) (string, error) {
		return "", &agent.Error{Kind: agent.KindInvalidRequest, Message: "unsupported audio"}
	})
	r := startMediaRun(t, model, func(o *Options) { o.Media.Transcriber = tr })
	r.fake.AddMedia("v1.amr", onebottest.MediaFile{Bytes: []byte("ID3\x03\x00\x00\x00\x00\x00\x00abc")})
	id := r.emit(false, onebot.Message{{Type: "record", Data: map[string]string{"file": "v1.amr"}}, onebot.TextSegment("listen")})
	o := r.await(id)
	require.Equal(t, outcome.Replied, o.Code)
	require.Contains(t, o.Reason, "voice not transcribed")
	require.Contains(t, current(t, model.calls(agent.PurposeChat)[0]).Content, "not transcribed")
}

func TestMediaStickerAloneTriggersNothing(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startMediaRun(t, model, func(o *Options) { o.NoRouter = false })
	id := r.emit(true, onebot.Message{{Type: "mface", Data: map[string]string{"summary": "[开心]", "url": "https://example.invalid/s.gif",
		"emoji_id": "1", "emoji_package_id": "2", "key": "k"}}})
	o := r.await(id)
	require.Equal(t, gate.IgnoredStickerOnly, o.Code, o.Reason)
	require.Empty(t, model.calls(agent.PurposeChat))
	require.Empty(t, model.calls(agent.PurposeRouter))
	require.Empty(t, model.calls(agent.PurposeVision))
}

// tgRun is a pipeline on the Telegram fake with a fake clock.
type tgRun struct {
	mediaRun
	tg *telegramtest.Server
}

func startTelegramMediaRun(t *testing.T, model *mediaModel, opt func(*Options)) *tgRun {
	t.Helper()
	r := &tgRun{mediaRun: mediaRun{t: t, model: model, outs: map[string]inbound.Outcome{},
		clk: clock.NewFake(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))}}
	r.tg = telegramtest.New(telegramtest.Config{Clock: r.clk})
	t.Cleanup(r.tg.Close)
	ch, err := telegram.New(telegram.Config{Token: telegramtest.DefaultToken, APIBase: r.tg.URL(), Clock: r.clk,
		PollTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	r.run(ch, opt)
	return r
}

const tgUser = 4242

// push posts a message from tgUser (in a group when group is set) and
// returns its queue item id.
func (r *tgRun) push(group bool, in telegramtest.Incoming) string {
	r.t.Helper()
	in.From = telegramtest.User{ID: tgUser, FirstName: "Ann"}
	in.Chat = telegramtest.Chat{ID: tgUser, Type: "private"}
	if group {
		in.Chat = telegramtest.Chat{ID: -100777, Type: "supergroup", Title: "photos"}
	}
	msg, err := r.tg.Push(r.t.Context(), in)
	require.NoError(r.t, err)
	ev := channel.Event{Platform: telegram.Platform, BotID: r.botID(), MessageID: strconv.FormatInt(msg.MessageID, 10),
		Chat: channel.Chat{Kind: channel.Private, ID: strconv.FormatInt(in.Chat.ID, 10)}}
	if group {
		ev.Chat.Kind = channel.Group
	}
	return ev.Key()
}

func (r *tgRun) botID() string {
	id, _, _ := strings.Cut(telegramtest.DefaultToken, ":")
	return id
}

func TestMediaTelegramPhotoWithCaptionIsSeen(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startTelegramMediaRun(t, model, nil)
	r.tg.AddFile("photo-big", redPNG(t, 16))
	id := r.push(false, telegramtest.Incoming{Photo: []telegramtest.PhotoSize{{FileID: "photo-small", FileUniqueID: "u1", Width: 90, Height: 90},
		{FileID: "photo-big", FileUniqueID: "u2", Width: 800, Height: 800}}, Caption: "is this nice?"})
	o := r.await(id)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	cur := current(t, model.calls(agent.PurposeChat)[0])
	require.Len(t, cur.Parts, 1, "the largest photo size, attached")
	require.Contains(t, cur.Content, "is this nice?")
}

func TestMediaTelegramVoiceIsTranscribed(t *testing.T) {
	t.Parallel()
	model := &mediaModel{}
	tr := agent.TranscriberFunc(func(_ context.Context, a agent.Audio) (string, error) {
		if a.MIME != "audio/ogg" || !strings.HasSuffix(a.Name, ".ogg") {
			return "", &agent.Error{Kind: agent.KindInvalidRequest, Message: "unexpected " + a.MIME + " " + a.Name}
		}
		return "see you at eight", nil
	})
	r := startTelegramMediaRun(t, model, func(o *Options) { o.Media.Transcriber = tr })
	r.tg.AddFile("voice-1", append([]byte("OggS\x00\x02"), bytes.Repeat([]byte{1}, 100)...))
	id := r.push(false, telegramtest.Incoming{Voice: &telegramtest.File{FileID: "voice-1", FileUniqueID: "v1", MimeType: "audio/ogg", Duration: 3}})
	o := r.await(id) // a voice-only message waits out the media window first
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	require.Contains(t, current(t, model.calls(agent.PurposeChat)[0]).Content, "[voice 3s: see you at eight]")
}

func TestMediaTelegramStickerAloneTriggersNothing(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startTelegramMediaRun(t, model, func(o *Options) { o.NoRouter = false })
	r.tg.AddFile("st-1", []byte("RIFF\x00\x00\x00\x00WEBPVP8 "))
	id := r.push(true, telegramtest.Incoming{Sticker: &telegramtest.Sticker{FileID: "st-1", FileUniqueID: "s1", Width: 512, Height: 512, Emoji: "😂"}})
	o := r.await(id)
	require.Equal(t, gate.IgnoredStickerOnly, o.Code, o.Reason)
	require.Empty(t, model.calls(agent.PurposeChat))
	require.Empty(t, model.calls(agent.PurposeRouter))
}

func TestMediaCannotSeeRegeneratesFromDescriptions(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	model.reply = func(req agent.Request) string {
		for _, m := range req.Messages {
			if len(m.Parts) > 0 {
				return "[[NO_IMAGE]]"
			}
		}
		return "a red one, nice"
	}
	r := startMediaRun(t, model, nil)
	r.fake.AddMedia("abc.image", onebottest.MediaFile{Bytes: redPNG(t, 8), Base64: true})
	id := r.emit(false, onebot.Message{imageSeg("abc.image"), onebot.TextSegment("what colour?")})
	o := r.await(id)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	chats := model.calls(agent.PurposeChat)
	require.Len(t, chats, 2, "generated once more, from the description")
	require.Len(t, current(t, chats[0]).Parts, 1)
	second := current(t, chats[1])
	require.Empty(t, second.Parts)
	require.Contains(t, second.Content, "[image: a small red square] what colour?")
	sent := r.fake.Sent()
	require.Len(t, sent, 1)
	var text strings.Builder
	for _, seg := range sent[0].Message {
		text.WriteString(seg.Data["text"])
	}
	require.Contains(t, text.String(), "a red one, nice")
}

func TestMediaRouterReadsTheDescription(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startMediaRun(t, model, func(o *Options) { o.NoRouter = false })
	r.fake.AddMedia("abc.image", onebottest.MediaFile{Bytes: redPNG(t, 8), Base64: true})
	id := r.emit(true, onebot.Message{imageSeg("abc.image"), onebot.TextSegment("look at this")})
	r.await(id)
	routes := model.calls(agent.PurposeRouter)
	require.NotEmpty(t, routes)
	var all strings.Builder
	for _, m := range routes[0].Messages {
		all.WriteString(m.Content)
	}
	require.Contains(t, all.String(), "[image: a small red square]")
}

func TestMediaTelegramAlbumIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startTelegramMediaRun(t, model, nil)
	photo := func(id string) []telegramtest.PhotoSize {
		r.tg.AddFile(id, redPNG(t, 8+len(id)))
		return []telegramtest.PhotoSize{{FileID: id, FileUniqueID: "u-" + id, Width: 100, Height: 100}}
	}
	first := r.push(false, telegramtest.Incoming{Photo: photo("a1"), Caption: "our trip!", MediaGroupID: "album-7"})
	second := r.push(false, telegramtest.Incoming{Photo: photo("a22"), MediaGroupID: "album-7"})
	third := r.push(false, telegramtest.Incoming{Photo: photo("a333"), MediaGroupID: "album-7"})
	r.queued(first, second, third) // as one getUpdates batch would deliver them
	o := r.await(first)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	for _, id := range []string{second, third} {
		po := r.await(id)
		require.Equal(t, outcome.SupersededMediaTurn, po.Code, po.Reason)
		require.Equal(t, first, po.MergedInto)
	}
	chats := model.calls(agent.PurposeChat)
	require.Len(t, chats, 1, "one answer for the album")
	cur := current(t, chats[0])
	require.Len(t, cur.Parts, 3)
	require.Contains(t, cur.Content, "our trip!")
	require.Len(t, r.tg.Sent(), 1)
}

// TestMediaMentionedPictureThenCaptionIsAnswered: "@bot [picture]" and
// then a caption: the caption's turn carries the mention, so the bot
// answers (the picture alone was addressed to it).
func TestMediaMentionedPictureThenCaptionIsAnswered(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startMediaRun(t, model, nil)
	r.fake.AddMedia("p1.image", onebottest.MediaFile{Bytes: redPNG(t, 8), Base64: true})
	photo := r.emit(true, onebot.Message{{Type: "at", Data: map[string]string{"qq": strconv.Itoa(mrBot)}}, imageSeg("p1.image")})
	r.clk.Advance(3 * time.Second)
	caption := r.emit(true, onebot.Message{onebot.TextSegment("lol")})
	o := r.await(caption)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	require.Equal(t, outcome.SupersededMediaTurn, r.await(photo).Code)
	chats := model.calls(agent.PurposeChat)
	require.Len(t, chats, 1)
	require.Len(t, current(t, chats[0]).Parts, 1)
}

// TestMediaStickerWithTextIsDescribed: a sticker is never attached as a
// picture; the prompt waits for its few-word description.
func TestMediaStickerWithTextIsDescribed(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startMediaRun(t, model, nil)
	r.fake.AddMedia("st.image", onebottest.MediaFile{Bytes: redPNG(t, 8), Base64: true})
	id := r.emit(false, onebot.Message{{Type: "image", Data: map[string]string{"file": "st.image", "sub_type": "1"}}, onebot.TextSegment("haha")})
	require.Equal(t, outcome.Replied, r.await(id).Code)
	cur := current(t, model.calls(agent.PurposeChat)[0])
	require.Empty(t, cur.Parts)
	require.Contains(t, cur.Content, "[sticker: a small red square] haha")
}

// TestMediaTelegramAlbumWithoutCaptionIsAnsweredOnce: the album's first
// picture to run answers for all of them.
func TestMediaTelegramAlbumWithoutCaptionIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	model := &mediaModel{seeing: true}
	r := startTelegramMediaRun(t, model, nil)
	photo := func(id string) []telegramtest.PhotoSize {
		r.tg.AddFile(id, redPNG(t, 8+len(id)))
		return []telegramtest.PhotoSize{{FileID: id, FileUniqueID: "u-" + id, Width: 100, Height: 100}}
	}
	ids := []string{
		r.push(false, telegramtest.Incoming{Photo: photo("a1"), MediaGroupID: "album-8"}),
		r.push(false, telegramtest.Incoming{Photo: photo("a22"), MediaGroupID: "album-8"}),
		r.push(false, telegramtest.Incoming{Photo: photo("a333"), MediaGroupID: "album-8"}),
	}
	r.queued(ids...)
	replied, superseded := 0, 0
	for _, id := range ids {
		switch o := r.await(id); o.Code {
		case outcome.Replied:
			replied++
		case outcome.SupersededMediaTurn:
			superseded++
		default:
			t.Fatalf("%s: %s (%s)", id, o.Code, o.Reason)
		}
	}
	require.Equal(t, 1, replied)
	require.Equal(t, 2, superseded)
	chats := model.calls(agent.PurposeChat)
	require.Len(t, chats, 1)
	require.Len(t, current(t, chats[0]).Parts, 3)
}

// TestMediaTranscriberDownStillAnswers: a transcriber that keeps failing
// transiently costs retries, and on the last attempt the message is
// answered with the clip untranscribed (the reason says so).
func TestMediaTranscriberDownStillAnswers(t *testing.T) {
	t.Parallel()
	model := &mediaModel{}
	var calls atomic.Int32
	tr := agent.TranscriberFunc(func(context.Context, agent.Audio) (string, error) {
		calls.Add(1)
		return "", &agent.Error{Kind: agent.KindServer, Message: "503 from the speech server"}
	})
	r := startMediaRun(t, model, func(o *Options) { o.Media.Transcriber, o.MaxAttempts = tr, 3 })
	r.fake.AddMedia("v1.amr", onebottest.MediaFile{Bytes: []byte("ID3\x03\x00\x00\x00\x00\x00\x00abc")})
	id := r.emit(false, onebot.Message{{Type: "record", Data: map[string]string{"file": "v1.amr"}}, onebot.TextSegment("Mira, are you there?")})
	for k := 1; k < 3; k++ {
		// Attempt k failed and its retry is recorded: move the clock past
		// the backoff, and only then (the adapter's call deadlines run on
		// the same clock).
		require.Eventually(t, func() bool {
			rec, err := r.p.opt.Queue.Lookup(t.Context(), id)
			return err == nil && rec.Status == inbound.StatusPending && rec.Attempts == k
		}, 20*time.Second, 5*time.Millisecond, "attempt %d", k)
		r.clk.Advance(inbound.RetryDelay(k, 0, 0) + time.Second)
	}
	var o inbound.Outcome
	require.Eventually(t, func() bool {
		got, ok := r.outcome(id)
		o = got
		return ok
	}, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	require.Contains(t, o.Reason, "voice not transcribed")
	require.Contains(t, o.Reason, "503 from the speech server")
	require.EqualValues(t, 3, calls.Load(), "one call per attempt")
	require.Contains(t, current(t, model.calls(agent.PurposeChat)[0]).Content, "not transcribed")
}

// burstModel holds the first chat call until released and calls every
// newer message a supplement, so a picture folds into a running reply.
type burstModel struct {
	mediaModel
	release chan struct{}
	first   chan struct{}
}

func (m *burstModel) Generate(ctx context.Context, req agent.Request) (*agent.Response, error) {
	switch req.Purpose {
	case agent.PurposeClassify:
		return &agent.Response{Text: `{"label":"supplement","confidence":0.99}`, Model: "c"}, nil
	case agent.PurposeChat:
		select {
		case m.first <- struct{}{}:
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-m.release:
			}
		default:
		}
	}
	return m.mediaModel.Generate(ctx, req)
}

// TestMediaPictureMergedIntoARunningReply: a picture message folded into
// the same person's reply being generated; the descriptions written for
// it never touch the segments the running turn reads (run with -race).
func TestMediaPictureMergedIntoARunningReply(t *testing.T) {
	t.Parallel()
	bm := &burstModel{mediaModel: mediaModel{seeing: true}, release: make(chan struct{}), first: make(chan struct{}, 1)}
	r := startMediaRun(t, &bm.mediaModel, func(o *Options) { o.Model = bm })
	r.fake.AddMedia("p1.image", onebottest.MediaFile{Bytes: redPNG(t, 8), Base64: true})
	first := r.emit(false, onebot.Message{onebot.TextSegment("hey")})
	require.Eventually(t, func() bool { return len(bm.first) == 1 }, 10*time.Second, time.Millisecond)
	second := r.emit(false, onebot.Message{imageSeg("p1.image"), onebot.TextSegment("look at this")})
	o2 := r.await(second)
	close(bm.release)
	o1 := r.await(first)
	require.True(t, o1.Code.Valid() && o2.Code.Valid())
	require.True(t, o1.Code.Replied() || o2.Code.Replied(), "%s / %s", o1.Code, o2.Code)
}

// TestMediaHoldSurvivesARestart: a picture queued before a restart is
// still taken into its caption sent after it.
func TestMediaHoldSurvivesARestart(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	model := &mediaModel{}
	var mu sync.Mutex
	outs := map[string]inbound.Outcome{}
	start := func() (*Pipeline, *chantest.Channel, func()) {
		ch := chantest.New(chantest.Config{BotID: "bot"})
		p, err := New(Options{Channels: []channel.Channel{ch}, DataDir: dir, Persona: "You are Mira.", Model: model, Clock: clk,
			NoPacing: true, NoRouter: true, AuditDisabled: func(string) bool { return true }, Logger: slog.New(slog.DiscardHandler),
			OnOutcome: func(id string, o inbound.Outcome) { mu.Lock(); outs[id] = o; mu.Unlock() }})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		require.Eventually(t, p.anyReady, 10*time.Second, 5*time.Millisecond)
		return p, ch, func() { cancel(); require.NoError(t, <-done); require.NoError(t, p.Close()) }
	}
	ann := channel.Sender{ID: "ann", Name: "Ann"}
	chat := channel.Chat{Kind: channel.Private, ID: "ann"}
	msg := func(id string, segs ...channel.Segment) channel.Event {
		return channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindMessage, Chat: chat, MessageID: id,
			Time: clk.Now(), Sender: ann, Segments: segs}
	}
	_, ch, stop := start()
	photo := msg("m1", channel.Image(channel.Media{FileID: "cat.png"}))
	require.NoError(t, ch.Inject(t.Context(), photo))
	stop() // before the media window ends
	clk.Advance(3 * time.Second)
	_, ch, stop = start()
	defer stop()
	caption := msg("m2", channel.Text("isn't she cute"))
	require.NoError(t, ch.Inject(t.Context(), caption))
	photo.Profile, caption.Profile = "default", "default"
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		clk.Advance(time.Second)
		_, a := outs[photo.Key()]
		_, b := outs[caption.Key()]
		return a && b
	}, 20*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, outcome.Replied, outs[caption.Key()].Code)
	require.Equal(t, outcome.SupersededMediaTurn, outs[photo.Key()].Code, outs[photo.Key()].Reason)
	require.Len(t, model.calls(agent.PurposeChat), 1)
}
