package persona

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store"
)

// The privacy scenario of issue 17 ("Must show"): a OneBot group of seven
// people with ten-digit QQ numbers, and private chats, played through the
// whole pipeline (the real OneBot adapter against its in-process fake,
// memory and the agent loop on, a tool that echoes ids back) with a
// scripted model that records every request. No request of any purpose
// may contain a real id, and no send may type one; the mutation check
// (TestPrivacyMutation) proves that a call site skipping the aliasing
// boundary makes the check fail.

const (
	pvBot   int64 = 3141592653
	pvGroup int64 = 738291045
	// pvFiller is a group the scenario never talks in: the fake's message
	// ids start at 1000, so it first stores pvFillers messages there and
	// the scenario's ids have five digits (QQ message ids are longer;
	// ids shorter than agent.MinScrubLen are not scrubbed from free text
	// by design).
	pvFiller int64 = 100200300
)

const (
	pvToken   = "privacy-token"
	pvFillers = 9000
	// pvWait bounds every wait of the scenario (real time): a deadline
	// for things to happen, never a timing assertion.
	pvWait = 20 * time.Second
)

type pvPerson struct {
	qq   int64
	name string
	role string
}

// The people of the group, by index.
const (
	pJ = iota // 阿杰
	pY        // 小雨
	pL        // Leo
	pW        // 王磊
	pM        // Mia
	pC        // 老陈, admin
	pK        // Kate
)

var pvPeople = []pvPerson{
	{1928374650, "阿杰", "member"},
	{2734019856, "小雨", "member"},
	{3049581726, "Leo", "member"},
	{4158203967, "王磊", "member"},
	{5261937048, "Mia", "member"},
	{6370482915, "老陈", "admin"},
	{7483920561, "Kate", "member"},
}

func pvQQ(n int64) string { return strconv.FormatInt(n, 10) }

// pvStep is one message of the scenario.
type pvStep struct {
	name    string // label for messages and expectations
	from    int
	private bool
	gap     time.Duration // clock advance before the message (default 25 s)
	// text is the message text; textf builds it from what happened so
	// far (message ids typed in text).
	text       string
	textf      func(r *pvRun) string
	mentionBot bool
	mentions   []int // people mentioned (at segments) before the text
	atAll      bool
	quote      func(r *pvRun) int32 // message id quoted
	image      bool
	// wantAt are the QQ numbers the first chunk of the reply must mention
	// (at segments); wantText is text the reply must contain.
	wantAt   []int64
	wantText []string
	burst    bool // sent together with the next step (same sender)
}

func pvSteps() []pvStep {
	quoteStep := func(name string) func(r *pvRun) int32 {
		return func(r *pvRun) int32 { return r.recs[name].ID }
	}
	botReplyTo := func(name string) func(r *pvRun) int32 {
		return func(r *pvRun) int32 {
			s := r.sends[name]
			require.NotEmpty(r.t, s, "no reply to %s to quote", name)
			return s[0].MessageID
		}
	}
	return []pvStep{
		{name: "g01", from: pC, text: "大家早，周六九溪徒步的事定一下"},
		{name: "g02", from: pJ, text: "我报名！"},
		{name: "g03", from: pY, text: "+1 我也去"},
		{name: "g04", from: pL, text: "count me in, where do we meet?"},
		{name: "g05", from: pW, text: "上次九溪那条路线挺好的，从龙井村上去"},
		{name: "g06", from: pM, text: "this is the map from last time", image: true},
		{name: "g07", from: pC, text: " 周六早上8点地铁站集合，别迟到", atAll: true},
		{name: "g08", from: pK, text: "got it 👍", quote: quoteStep("g07")},
		{name: "g09", from: pY, text: " 帮我叫一下阿杰，他没回我", mentionBot: true, wantAt: []int64{pvPeople[pJ].qq}},
		{name: "g10", from: pJ, text: "来了来了"},
		{name: "g11", from: pY, text: "派派 你在吗", wantAt: []int64{pvPeople[pY].qq}},
		{name: "g12", from: pL, text: "hey 派派 what's the plan for Saturday?", wantAt: []int64{pvPeople[pL].qq}},
		{name: "g13", from: pW, textf: func(r *pvRun) string {
			return fmt.Sprintf("看 %d 那条，时间写得很清楚", r.recs["g07"].ID)
		}},
		{name: "g14", from: pC, text: "新人加群 " + pvQQ(pvGroup) + "，备注写真名"},
		{name: "g15", from: pM, text: "阿杰的QQ是" + pvQQ(pvPeople[pJ].qq) + "，有事加他", image: true},
		{name: "g16", from: pK, text: "which message had the meeting time?", quote: botReplyTo("g12"), wantText: []string{"老陈"}},
		{name: "g17", from: pW, text: " 谁说得对，我还是小雨？", mentionBot: true, wantText: []string{"王磊"}},
		{name: "g18", from: pJ, text: "有人知道山上有没有信号吗"},
		{name: "g19", from: pY, text: "好的谢谢"},
		{name: "g20", from: pM, text: " 列一下装备清单", mentionBot: true, gap: 40 * time.Second},
		{name: "g21", from: pK, text: " 查一下 这是谁", mentionBot: true, mentions: []int{pJ}, wantAt: []int64{pvPeople[pK].qq}},
		{name: "g22", from: pJ, text: " 帮我看看这条路线", mentionBot: true, burst: true, wantAt: []int64{pvPeople[pJ].qq}},
		{name: "g23", from: pJ, text: " 另外我的QQ是" + pvQQ(pvPeople[pJ].qq) + "，加我，群号" + pvQQ(pvGroup), mentionBot: true},
		{name: "g24", from: pL, text: "anyone know if it'll rain on Saturday?", gap: 45 * time.Second},
		{name: "g25", from: pW, text: "天气预报说多云", mentions: []int{pL}},
		{name: "g26", from: pC, text: "记得带水，至少两升"},
		{name: "g27", from: pM, text: "I'll bring snacks for everyone", image: true},
		{name: "g28", from: pK, text: "nice, thanks Mia", quote: quoteStep("g27")},
		{name: "g29", from: pY, text: "我可能会晚到十分钟", mentions: []int{pC}},
		{name: "g30", from: pC, text: "没事，等你", quote: quoteStep("g29")},
		{name: "g31", from: pJ, text: "Leo 你开车吗", mentions: []int{pL}},
		{name: "g32", from: pL, text: "no car this time, taking the metro"},
		{name: "g33", from: pW, text: "我可以拼车，还有两个位置"},
		{name: "g34", from: pK, text: "me please!", quote: quoteStep("g33")},
		{name: "g35", from: pM, textf: func(r *pvRun) string {
			return fmt.Sprintf("%d 这条里的地图谁还有原图？", r.recs["g06"].ID)
		}},
		{name: "g36", from: pJ, text: "我有，晚点发群里", image: true},
		{name: "g37", from: pC, text: " 还记得九溪那条路线是从哪上去的吗", mentionBot: true},
		{name: "g38", from: pY, text: "哈哈哈"},
		{name: "g39", from: pW, text: " 别忘了周六8点！", atAll: true},
		{name: "g40", from: pL, text: " thanks for organising!", mentionBot: true, wantAt: []int64{pvPeople[pL].qq}},
		// Private chats: ids typed in text (the peer's own, the bot's, a
		// group member's, the group's).
		{name: "p01", from: pL, private: true, text: "hi 派派, my QQ is " + pvQQ(pvPeople[pL].qq) + " and you're " + pvQQ(pvBot) + " right?"},
		{name: "p02", from: pM, private: true, text: "派派 我在群" + pvQQ(pvGroup) + "里，帮我记一下我的生日是3月5号，我的QQ是" + pvQQ(pvPeople[pM].qq)},
		{name: "p03", from: pL, private: true, text: "阿杰的QQ是" + pvQQ(pvPeople[pJ].qq) + "，他也在群" + pvQQ(pvGroup) + "里"},
		{name: "p04", from: pM, private: true, text: "thanks, see you Saturday"},
	}
}

// pvRun is one run of the scenario.
type pvRun struct {
	t     *testing.T
	clk   *clock.Fake
	fake  *onebottest.Server
	p     *Pipeline
	db    *store.DB
	model *pvModel

	recs  map[string]onebottest.Record // incoming message by step name
	sends map[string][]onebottest.Sent // the bot's sends by step name
	codes map[string]outcome.Code      // outcome by step name
	order []string                     // step names in order

	mu       sync.Mutex
	outcomes map[string]inbound.Outcome // by item id
	changed  chan struct{}
}

// runPrivacyScenario plays the scenario; bypass names a purpose whose
// calls skip the aliasing boundary ("" for none).
func runPrivacyScenario(t *testing.T, bypass string) *pvRun {
	t.Helper()
	ctx := t.Context()
	r := &pvRun{t: t, recs: map[string]onebottest.Record{}, sends: map[string][]onebottest.Sent{},
		codes: map[string]outcome.Code{}, outcomes: map[string]inbound.Outcome{}, changed: make(chan struct{}, 1)}
	r.clk = clock.NewFake(time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC))
	r.fake = onebottest.New(onebottest.Config{SelfID: pvBot, Nickname: "派派", AccessToken: pvToken, Clock: r.clk})
	t.Cleanup(r.fake.Close)
	for range pvFillers {
		_, err := r.fake.EmitMessage(ctx, onebottest.Incoming{GroupID: pvFiller, UserID: 10001, Lost: true,
			Message: onebot.Message{onebot.TextSegment("x")}})
		require.NoError(t, err)
	}
	r.fake.AddGroup(pvGroup, "周末徒步群")
	for _, p := range pvPeople {
		r.fake.SetMember(pvGroup, onebottest.Member{UserID: p.qq, Nickname: p.name, Card: p.name, Role: p.role})
	}
	srv := httptest.NewServer(r.fake)
	t.Cleanup(srv.Close)
	// The adapter's clock dates the bot's sends; the scenario moves it only
	// while no call is in flight.
	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeForwardWS, URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/",
		AccessToken: pvToken, Logger: slog.New(slog.DiscardHandler), Clock: r.clk})
	require.NoError(t, err)

	reg := agent.NewRegistry()
	require.NoError(t, reg.Register(agent.ToolFunc{
		ToolSpec: agent.ToolSpec{Name: "whois", Description: "who a participant is, by their id",
			Parameters: json.RawMessage(`{"type":"object","properties":{"user":{"type":"string"}},"required":["user"]}`)},
		F: func(_ context.Context, args json.RawMessage) (string, error) {
			var a struct {
				User string `json:"user"`
			}
			if err := json.Unmarshal(args, &a); err != nil {
				return "", err
			}
			// Echoes the id it was given, with the chat's and the bot's.
			return fmt.Sprintf("user %s (QQ %s) is a member of group %d, where the bot is %d", a.User, a.User, pvGroup, pvBot), nil
		},
	}, agent.Core(), agent.Purpose("who a participant is")))

	db, err := store.Open(t.TempDir()+"/persona.db", store.Options{Clock: r.clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	r.db = db
	r.model = newPVModel()
	p, err := New(Options{
		Channels: []channel.Channel{ch}, DB: db, DataDir: t.TempDir(),
		Persona: "You are 派派, the friendly helper of a hiking group.", Aliases: []string{"派派"},
		Model: r.model, Clock: r.clk, NoPacing: true, Memory: true, Agent: true, Tools: reg,
		Logger: pvLogger(),
		OnOutcome: func(id string, o inbound.Outcome) {
			r.mu.Lock()
			r.outcomes[id] = o
			r.mu.Unlock()
			select {
			case r.changed <- struct{}{}:
			default:
			}
		},
	})
	require.NoError(t, err)
	r.p = p
	// Internal knob: summaries fold epochs of 10 messages after keeping
	// 20, so that a scenario of some 50 messages summarises (the default,
	// 50 after 50, needs 100).
	p.gen.summarizer, err = memory.NewSummarizer(db, p.model, memory.SummaryConfig{Epoch: 10, KeepRecent: 20,
		Clock: r.clk, Logger: p.log, Scopes: p.scopes})
	require.NoError(t, err)
	if bypass != "" {
		p.bypass = map[string]bool{bypass: true}
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, p.Close())
	})
	require.Eventually(t, p.anyReady, pvWait, 5*time.Millisecond, "the OneBot channel never became ready")

	steps := pvSteps()
	for i := 0; i < len(steps); i++ {
		s := steps[i]
		if s.burst {
			r.burst(s, steps[i+1])
			i++
			continue
		}
		r.clk.Advance(pvGap(s.gap, 25*time.Second))
		before := len(r.fake.Sent())
		rec := r.emit(s)
		r.await(s.name, rec)
		r.settle()
		r.sends[s.name] = r.fake.Sent()[before:]
	}
	// The background memory work of the last replies.
	r.settle()
	return r
}

// pvLogger is the pipeline's logger: silent, or the debug log on standard
// error with PERSONA_PRIVACY_DEBUG set (which also logs every send).
func pvLogger() *slog.Logger {
	if os.Getenv("PERSONA_PRIVACY_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// pvGap returns d, or def when d is zero.
func pvGap(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// emit posts one step's message on the fake platform.
func (r *pvRun) emit(s pvStep) onebottest.Record {
	r.t.Helper()
	from := pvPeople[s.from]
	var msg onebot.Message
	if s.quote != nil {
		msg = append(msg, onebot.Segment{Type: "reply", Data: map[string]string{"id": strconv.Itoa(int(s.quote(r)))}})
	}
	if s.mentionBot {
		msg = append(msg, onebot.Segment{Type: "at", Data: map[string]string{"qq": pvQQ(pvBot)}})
	}
	if s.atAll {
		msg = append(msg, onebot.Segment{Type: "at", Data: map[string]string{"qq": "all"}})
	}
	for _, m := range s.mentions {
		msg = append(msg, onebot.Segment{Type: "at", Data: map[string]string{"qq": pvQQ(pvPeople[m].qq)}})
	}
	text := s.text
	if s.textf != nil {
		text = s.textf(r)
	}
	msg = append(msg, onebot.TextSegment(text))
	if s.image {
		// The URL carries the uploader's QQ number and the group number,
		// as QQ's image URLs do.
		h := fmt.Sprintf("%X", len(r.recs)*7919+int(from.qq%9973))
		msg = append(msg, onebot.Segment{Type: "image", Data: map[string]string{"file": h + ".image",
			"url": fmt.Sprintf("https://gchat.qpic.cn/gchatpic_new/%d/%d-2534335053-%s/0?term=2&uin=%d", from.qq, pvGroup, h, from.qq)}})
	}
	in := onebottest.Incoming{UserID: from.qq, Nickname: from.name, Message: msg}
	if !s.private {
		in.GroupID, in.Card, in.Role = pvGroup, from.name, from.role
	}
	rec, err := r.fake.EmitMessage(r.t.Context(), in)
	require.NoError(r.t, err)
	r.recs[s.name] = rec
	r.order = append(r.order, s.name)
	return rec
}

// key is the queue item id of an incoming record.
func (r *pvRun) key(rec onebottest.Record) string {
	ev := channel.Event{Platform: onebot.DefaultPlatform, BotID: pvQQ(pvBot), MessageID: strconv.Itoa(int(rec.ID)),
		Chat: channel.Chat{Kind: channel.Group, ID: pvQQ(rec.GroupID)}}
	if rec.GroupID == 0 {
		ev.Chat = channel.Chat{Kind: channel.Private, ID: pvQQ(rec.UserID)}
	}
	return ev.Key()
}

// await waits for the terminal record of a message.
func (r *pvRun) await(name string, rec onebottest.Record) inbound.Outcome {
	r.t.Helper()
	id := r.key(rec)
	deadline := time.After(pvWait)
	for {
		r.mu.Lock()
		o, ok := r.outcomes[id]
		r.mu.Unlock()
		if ok {
			r.codes[name] = o.Code
			return o
		}
		select {
		case <-r.changed:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			r.t.Fatalf("no outcome for %s (%s)", name, id)
		}
	}
}

// settle waits until no model call runs and every memory extraction job
// is done, so that the next message sees what the last one left.
func (r *pvRun) settle() {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		if r.model.busy.Load() > 0 {
			return false
		}
		c, err := r.db.JobCounts(r.t.Context())
		return err == nil && c["pending"] == 0 && c["leased"] == 0 && r.model.busy.Load() == 0
	}, pvWait, 2*time.Millisecond, "memory work never settled")
}

// burst sends a and b, two direct messages of one person: b arrives while
// a's reply is being generated, so the burst classifier rates it.
func (r *pvRun) burst(a, b pvStep) {
	r.t.Helper()
	r.clk.Advance(pvGap(a.gap, 25*time.Second))
	before := len(r.fake.Sent())
	ra := r.emit(a)
	select {
	case <-r.model.burstSeen:
	case <-time.After(pvWait):
		r.t.Fatal("the burst's first reply was never generated")
	}
	r.clk.Advance(5 * time.Second)
	rb := r.emit(b)
	r.await(a.name, ra)
	r.await(b.name, rb)
	r.settle()
	sent := r.fake.Sent()[before:]
	// Each reply quotes its message (group replies do).
	for _, s := range sent {
		for _, seg := range s.Message {
			if seg.Type == "reply" && seg.Data["id"] == strconv.Itoa(int(ra.ID)) {
				r.sends[a.name] = append(r.sends[a.name], s)
			}
			if seg.Type == "reply" && seg.Data["id"] == strconv.Itoa(int(rb.ID)) {
				r.sends[b.name] = append(r.sends[b.name], s)
			}
		}
	}
}

// realIDs returns every real id of the run: the people's and the bot's QQ
// numbers, the group's, and every message id (incoming and sent) of at
// least agent.MinScrubLen digits.
func (r *pvRun) realIDs() (people, messages []string) {
	for _, p := range pvPeople {
		people = append(people, pvQQ(p.qq))
	}
	people = append(people, pvQQ(pvBot), pvQQ(pvGroup))
	seen := map[string]bool{}
	addMsg := func(id int32) {
		s := strconv.Itoa(int(id))
		if len(strings.TrimPrefix(s, "-")) >= agent.MinScrubLen && !seen[s] {
			seen[s] = true
			messages = append(messages, s)
		}
	}
	for _, rec := range r.recs {
		addMsg(rec.ID)
	}
	for _, s := range r.fake.Sent() {
		addMsg(s.MessageID)
	}
	sort.Strings(messages)
	return people, messages
}

// pvLeak is a real id found in a model request.
type pvLeak struct {
	purpose string
	session string
	id      string
	context string
}

func (l pvLeak) String() string {
	return fmt.Sprintf("%s request of %s shows %s: …%s…", l.purpose, l.session, l.id, l.context)
}

// foreign reports whether the leaked id belongs to another chat than the
// request's: the group's number, or another person's QQ number, typed in
// a private chat. A session's Scope knows the ids its own chat showed.
func (l pvLeak) foreign() bool {
	sp, err := channel.ParseSessionKey(l.session)
	if err != nil || sp.Chat.Kind != channel.Private {
		return false
	}
	if l.id == pvQQ(pvGroup) {
		return true
	}
	for _, p := range pvPeople {
		if l.id == pvQQ(p.qq) && l.id != sp.Chat.ID {
			return true
		}
	}
	return false
}

// inGroup reports whether the leaking request was made for the group.
func (l pvLeak) inGroup() bool {
	sp, err := channel.ParseSessionKey(l.session)
	return err == nil && sp.Chat.Kind == channel.Group
}

// leaks returns the real ids in the serialized model requests: QQ
// numbers anywhere, message ids as whole tokens (a digit run, optionally
// after '-', not part of a longer word).
func (r *pvRun) leaks() []pvLeak {
	people, messages := r.realIDs()
	msgIDs := map[string]string{} // digits → id
	for _, id := range messages {
		msgIDs[strings.TrimPrefix(id, "-")] = id
	}
	var out []pvLeak
	for _, q := range r.model.requests() {
		s := string(q.body)
		for _, id := range people {
			if i := strings.Index(s, id); i >= 0 {
				out = append(out, pvLeak{q.purpose, q.session, id, pvAround(s, i, len(id))})
			}
		}
		// Every word (a maximal run of ASCII letters, digits and '_')
		// that is a message id's digits.
		for i := 0; i < len(s); {
			if !pvWordByte(s[i]) {
				i++
				continue
			}
			j := i
			for j < len(s) && pvWordByte(s[j]) {
				j++
			}
			if id, ok := msgIDs[s[i:j]]; ok {
				out = append(out, pvLeak{q.purpose, q.session, id, pvAround(s, i, j-i)})
			}
			i = j
		}
	}
	return out
}

func pvWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func pvAround(s string, i, n int) string {
	from, to := max(0, i-60), min(len(s), i+n+60)
	for from > 0 && !pvRuneStart(s[from]) {
		from--
	}
	for to < len(s) && !pvRuneStart(s[to]) {
		to++
	}
	return s[from:to]
}

func pvRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// typedIDs returns the sends that type a participant's id (a person's, the
// bot's or the group's QQ number) as text: text segments and the text of
// merged-forward nodes.
func (r *pvRun) typedIDs() []string {
	people, _ := r.realIDs()
	var out []string
	check := func(where, text string) {
		for _, id := range people {
			if strings.Contains(text, id) {
				out = append(out, fmt.Sprintf("%s types %s: %q", where, id, text))
			}
		}
	}
	for i, s := range r.fake.Sent() {
		for _, seg := range s.Message {
			if seg.Type == "text" {
				check(fmt.Sprintf("send %d (%s)", i, s.Action), seg.Data["text"])
			}
		}
		for j, n := range s.Forward {
			check(fmt.Sprintf("send %d node %d", i, j), n.Name)
			for _, seg := range n.Content {
				if seg.Type == "text" {
					check(fmt.Sprintf("send %d node %d", i, j), seg.Data["text"])
				}
			}
		}
	}
	return out
}

// purposes returns the number of requests per purpose.
func (r *pvRun) purposes() map[string]int {
	out := map[string]int{}
	for _, q := range r.model.requests() {
		out[q.purpose]++
	}
	return out
}

// TestPrivacyNoRealIDReachesAModel is the privacy test of issue 17: no
// model request of any purpose shows a real id, no send types one, and
// the ways the model refers to people become platform mentions.
func TestPrivacyNoRealIDReachesAModel(t *testing.T) {
	t.Parallel()
	r := runPrivacyScenario(t, "")
	counts := r.purposes()
	t.Logf("model requests per purpose: %v", counts)
	if os.Getenv("PERSONA_PRIVACY_DEBUG") != "" {
		for _, name := range r.order {
			for _, s := range r.sends[name] {
				t.Logf("%s %s → %v %v", name, r.codes[name], s.Message, s.Forward)
			}
		}
	}
	for _, purpose := range []string{agent.PurposeRouter, agent.PurposeChat, agent.PurposeAudit, agent.PurposeDedup,
		agent.PurposeMemory, agent.PurposeSummary, agent.PurposeClassify, agent.PurposeCompress} {
		require.Positive(t, counts[purpose], "the scenario makes no %s call", purpose)
	}
	require.Positive(t, r.model.toolResults.Load(), "no tool result reached the model")

	leaks := r.leaks()
	t.Run("ids of the chat", func(t *testing.T) {
		for _, l := range leaks {
			if !l.foreign() {
				t.Errorf("leak: %s", l)
			}
		}
	})
	// The case: the group's number and a group member's QQ number
	// typed in a private chat with the bot.
	t.Run("ids of other chats typed in a private chat", func(t *testing.T) {
		for _, l := range leaks {
			if l.foreign() {
				t.Errorf("leak: %s", l)
			}
		}
	})
	for _, s := range r.typedIDs() {
		t.Errorf("typed id: %s", s)
	}

	// Every step was decided; the direct ones were answered.
	for _, name := range r.order {
		require.NotEmpty(t, r.codes[name], "step %s", name)
	}
	for _, name := range []string{"g09", "g11", "g12", "g16", "g17", "g20", "g21", "g22", "g23", "g37", "g40", "p01", "p02", "p03", "p04"} {
		require.True(t, r.codes[name].Replied(), "step %s ended %s", name, r.codes[name])
	}
	require.Equal(t, outcome.RepliedProactive, r.codes["g18"], "the router let the question g18 through")

	// The mention forms became platform mentions.
	for _, s := range pvSteps() {
		if len(s.wantAt) == 0 && len(s.wantText) == 0 {
			continue
		}
		sends := r.sends[s.name]
		require.NotEmpty(t, sends, "no reply to %s", s.name)
		first := sends[0].Message
		var ats []string
		for _, seg := range first {
			if seg.Type == "at" {
				ats = append(ats, seg.Data["qq"])
			}
		}
		for _, want := range s.wantAt {
			require.Contains(t, ats, pvQQ(want), "step %s: reply %v", s.name, first)
		}
		for _, want := range s.wantText {
			require.Contains(t, first.PlainText(), want, "step %s: reply %v", s.name, first)
		}
	}
	// A mention written later in the text reads as the name (the Exit's
	// rule); only the leading one is a platform mention.
	t.Run("a later mention reads as the name", func(t *testing.T) {
		first := r.sends["g12"][0].Message
		require.Contains(t, first.PlainText(), "@老陈's note", "g12's reply: %v", first)
	})
	// The bare alias written in g17's reply reads as the person's name,
	// with no mention.
	for _, seg := range r.sends["g17"][0].Message {
		require.NotEqual(t, "at", seg.Type, "g17's reply names 王磊 without mentioning anyone: %v", r.sends["g17"][0].Message)
	}
	// The quote marker: g16's reply quotes g16.
	require.Equal(t, "reply", r.sends["g16"][0].Message[0].Type)
	require.Equal(t, strconv.Itoa(int(r.recs["g16"].ID)), r.sends["g16"][0].Message[0].Data["id"])
	// The long reply went out compressed (six messages, or one
	// merged-forward card of six nodes), the alias in its last item
	// written as the person's name.
	var long []string
	for _, s := range r.sends["g20"] {
		if len(s.Forward) > 0 {
			for _, n := range s.Forward {
				long = append(long, n.Content.PlainText())
			}
			continue
		}
		long = append(long, s.Message.PlainText())
	}
	require.Len(t, long, 6, "g20's reply, compressed: %q", long)
	require.Contains(t, long[5], "问问 阿杰 还缺什么")
	// Six chunks make a merged-forward card on OneBot (the sender's
	// threshold is five), whose nodes the check above covers.
	t.Run("the long reply is one merged-forward card", func(t *testing.T) {
		require.Len(t, r.sends["g20"], 1, "g20's reply went out as %d messages", len(r.sends["g20"]))
		require.Len(t, r.sends["g20"][0].Forward, 6)
	})
}

// TestPrivacyMutation proves the privacy test catches a call site that
// skips the aliasing boundary: the scenario is played once per purpose
// with that purpose's calls let past the boundary (Pipeline.bypass), and
// the privacy check must fail with a leak in a request of that purpose.
//
// The router, memory extraction and summaries render every id through
// the session's Scope themselves before the boundary sees the request
// (defence in depth): letting their calls past the boundary leaks
// nothing, so no content check can tell. For them the test only requires
// that the calls were made and logs that they stayed clean.
func TestPrivacyMutation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		purpose string
		caught  bool
	}{
		{agent.PurposeChat, true},
		{agent.PurposeAudit, true},
		{agent.PurposeDedup, true},
		{agent.PurposeClassify, true},
		{agent.PurposeCompress, true},
		{agent.PurposeRouter, false},
		{agent.PurposeMemory, false},
		{agent.PurposeSummary, false},
	} {
		t.Run(tc.purpose, func(t *testing.T) {
			t.Parallel()
			r := runPrivacyScenario(t, tc.purpose)
			require.Positive(t, r.purposes()[tc.purpose], "the scenario makes no %s call", tc.purpose)
			// Only the group's requests count: their baseline is clean
			// (see the privacy test for what private chats still show).
			var mine []pvLeak
			for _, l := range r.leaks() {
				if l.purpose == tc.purpose && l.inGroup() {
					mine = append(mine, l)
				}
			}
			if !tc.caught {
				t.Logf("%s past the boundary: %d leaks (the call site aliases on its own)", tc.purpose, len(mine))
				return
			}
			require.NotEmpty(t, mine, "with %s calls past the boundary, the privacy check still passes", tc.purpose)
			t.Logf("%s past the boundary: %d leaks, e.g. %s", tc.purpose, len(mine), mine[0])
		})
	}
}

// pvModel is the scenario's scripted model: it answers every purpose the
// way a sensible model would, from what the request shows, and records
// every request.
type pvModel struct {
	mu   sync.Mutex
	reqs []pvReq
	busy atomic.Int64

	burstSeen   chan struct{} // closed when the burst's first reply is generated
	burstOnce   sync.Once
	classified  chan struct{} // closed at the first classifier call
	classOnce   sync.Once
	toolResults atomic.Int64
	replies     atomic.Int64
}

type pvReq struct {
	purpose string
	session string
	body    []byte
	req     agent.Request
}

func newPVModel() *pvModel {
	return &pvModel{burstSeen: make(chan struct{}), classified: make(chan struct{})}
}

func (m *pvModel) requests() []pvReq {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reqs)
}

func (m *pvModel) Generate(ctx context.Context, req agent.Request) (*agent.Response, error) {
	m.busy.Add(1)
	defer m.busy.Add(-1)
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.reqs = append(m.reqs, pvReq{purpose: req.Purpose, session: agent.SessionFrom(ctx), body: body, req: req})
	m.mu.Unlock()
	text, calls, err := m.answer(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := &agent.Response{Text: text, ToolCalls: calls, Model: "pv", FinishReason: "stop",
		Usage: agent.Usage{InputTokens: len(body) / 4, OutputTokens: len(text) / 4}}
	if len(calls) > 0 {
		resp.FinishReason = "tool_calls"
	}
	return resp, nil
}

func pvLastUser(req agent.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == agent.RoleUser {
			return req.Messages[i].Content
		}
	}
	return ""
}

var (
	pvAliasRe   = regexp.MustCompile(`u_[a-z2-7]{8}(?:[a-z2-7]{8})?`)
	pvPersonRe  = regexp.MustCompile(`([^\s:()\[\]，,]+) \((u_[a-z2-7]{8}(?:[a-z2-7]{8})?)\)`)
	pvYouAreRe  = regexp.MustCompile(`You are (u_[a-z2-7]+) in this`)
	pvSpeakerRe = regexp.MustCompile(`Speaker: [^\n]*?\((u_[a-z2-7]+)\)`)
	pvCurrentRe = regexp.MustCompile(`^\[current\] \[(m_[a-z2-7]+)\]`)
	pvNewMsgRe  = regexp.MustCompile(`NEW MESSAGE:\n\[[^\]]*\] [^\n]*?\((u_[a-z2-7]+)\): ([^\n]*)`)
)

func (m *pvModel) answer(ctx context.Context, req agent.Request) (string, []agent.ToolCall, error) {
	switch req.Purpose {
	case agent.PurposeRouter:
		return pvRouterAnswer(pvLastUser(req)), nil, nil
	case agent.PurposeAudit:
		return `{"closing":{"kind":"none","confidence":0.99},"group_stop":{"requested":false,"confidence":0.99},` +
			`"loop":{"hit":false,"confidence":0.99},"safety":{"score":0.99},` +
			`"quality":{"ok":true,"problems":[],"send_confidence":0.99},"refusal":{"is_refusal":false,"confidence":0.99}}`, nil, nil
	case agent.PurposeDedup:
		return `{"verdict":"keep","confidence":0.99,"text":""}`, nil, nil
	case agent.PurposeClassify:
		m.classOnce.Do(func() { close(m.classified) })
		return `{"label":"independent","confidence":0.95}`, nil, nil
	case agent.PurposeCompress:
		// The first five items and the last.
		parts := strings.Split(pvLastUser(req), "[persona-msg]")
		if len(parts) > 6 {
			parts = append(parts[:5], parts[len(parts)-1])
		}
		return strings.Join(parts, "[persona-msg]"), nil, nil
	case agent.PurposeMemory:
		mm := pvNewMsgRe.FindStringSubmatch(pvLastUser(req))
		if mm == nil {
			return `{"candidates":[]}`, nil, nil
		}
		text := []rune(mm[2])
		c := map[string]any{"op": "upsert", "scope": "user", "subject": mm[1], "key": "said_" + strconv.Itoa(len(text)),
			"kind": "fact", "content": mm[1] + " said: " + string(text), "evidence": string(text[:min(len(text), 50)]),
			"source_type": "explicit", "confidence": 0.95, "importance": 0.8}
		b, err := json.Marshal(map[string]any{"candidates": []any{c}})
		return string(b), nil, err
	case agent.PurposeSummary:
		people := slices.Compact(slices.Sorted(slices.Values(pvAliasRe.FindAllString(pvLastUser(req), -1))))
		return "Topics: the Saturday hike at 九溪 with " + strings.Join(people, ", ") + ".\nConclusions: meet at 8 at the metro station.\nOpen items: gear and the weather.", nil, nil
	case agent.PurposeChat:
		return m.chat(ctx, req)
	}
	return "", nil, fmt.Errorf("pvModel: unexpected purpose %q", req.Purpose)
}

// routerAnswer rates every candidate: not directed, a high chat-in score
// for questions to the group.
func pvRouterAnswer(user string) string {
	var in struct {
		Candidates []struct {
			MessageID string `json:"message_id"`
			Text      string `json:"text"`
		} `json:"candidates"`
	}
	if i := strings.IndexByte(user, '{'); i >= 0 {
		_ = json.Unmarshal([]byte(user[i:]), &in)
	}
	type rel struct {
		Directed string `json:"directed"`
		Reason   string `json:"reason"`
	}
	type score struct {
		Score  float64 `json:"score"`
		Reason string  `json:"reason"`
	}
	type cand struct {
		MessageID string `json:"message_id"`
		Relevance rel    `json:"relevance"`
		ChatIn    score  `json:"chat_in"`
	}
	out := struct {
		Candidates []cand `json:"candidates"`
	}{Candidates: []cand{}}
	for _, c := range in.Candidates {
		s := 0.1
		if strings.Contains(c.Text, "有人知道") || strings.Contains(strings.ToLower(c.Text), "anyone know") {
			s = 0.97 // above the low level's threshold, 0.95
		}
		out.Candidates = append(out.Candidates, cand{MessageID: c.MessageID, Relevance: rel{"no", "group talk"}, ChatIn: score{s, "a question to the group"}})
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// chat answers a generation step of the agent loop.
func (m *pvModel) chat(ctx context.Context, req agent.Request) (string, []agent.ToolCall, error) {
	var cur, speaker, bot string
	names := map[string]string{}
	for _, msg := range req.Messages {
		if msg.Role == agent.RoleUser && strings.HasPrefix(msg.Content, "[current] ") {
			cur = msg.Content
		}
		if mm := pvYouAreRe.FindStringSubmatch(msg.Content); mm != nil {
			bot = mm[1]
		}
		if mm := pvSpeakerRe.FindStringSubmatch(msg.Content); mm != nil {
			speaker = mm[1]
		}
		for _, mm := range pvPersonRe.FindAllStringSubmatch(msg.Content, -1) {
			names[mm[1]] = mm[2]
		}
	}
	curMsg := ""
	if mm := pvCurrentRe.FindStringSubmatch(cur); mm != nil {
		curMsg = mm[1]
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role == agent.RoleTool {
		m.toolResults.Add(1)
		target := pvAliasRe.FindString(last.Content)
		return "[persona-at:" + speaker + "] 查到了，他是 " + target + "，也是我们群的", nil, nil
	}
	private := !strings.Contains(strings.Join(pvContents(req), "\n"), "in this group")
	switch {
	case strings.Contains(cur, "查一下"):
		target := ""
		for _, a := range pvAliasRe.FindAllString(cur, -1) {
			if a != bot && a != speaker {
				target = a
			}
		}
		args, _ := json.Marshal(map[string]string{"user": target})
		return "", []agent.ToolCall{{ID: "call_whois", Name: "whois", Arguments: args}}, nil
	case strings.Contains(cur, "帮我看看这条路线"):
		m.burstOnce.Do(func() { close(m.burstSeen) })
		select {
		case <-m.classified:
		case <-ctx.Done():
			return "", nil, ctx.Err()
		case <-time.After(pvWait):
		}
		return "[persona-at:" + names["阿杰"] + "] 路线没问题，九溪那条很好走", nil, nil
	case strings.Contains(cur, "叫一下阿杰"):
		return "[persona-at:" + names["阿杰"] + "] 小雨找你", nil, nil
	case strings.Contains(cur, "你在吗"):
		return "@" + speaker + " 在的在的", nil, nil
	case strings.Contains(cur, "what's the plan"):
		return "@Leo 8am at the metro station, see [persona-at:" + names["老陈"] + "]'s note", nil, nil
	case strings.Contains(cur, "which message"):
		return "[persona-reply:" + curMsg + "] the one from " + names["老陈"] + ": 8点地铁站集合", nil, nil
	case strings.Contains(cur, "谁说得对"):
		return "我觉得 " + names["王磊"] + " 说得对", nil, nil
	case strings.Contains(cur, "装备清单"):
		items := []string{"登山鞋", "雨衣", "两升水", "头灯", "防晒霜", "充电宝", "零食", "急救包", "地图", "问问 " + names["阿杰"] + " 还缺什么"}
		for i := range items {
			items[i] = strconv.Itoa(i+1) + ". " + items[i]
		}
		return strings.Join(items, "[persona-msg]"), nil, nil
	case strings.Contains(cur, "有人知道"):
		return "山顶信号一般，建议提前下载离线地图", nil, nil
	case strings.Contains(cur, "anyone know"):
		return "the forecast says cloudy, no rain", nil, nil
	case private:
		return fmt.Sprintf("好的，记下了（%d）", m.replies.Add(1)), nil, nil
	}
	// Numbered, so that no two replies read the same (recall tests tell
	// messages apart by their text).
	return fmt.Sprintf("[persona-at:%s] 收到～ 这是第%d条", speaker, m.replies.Add(1)), nil, nil
}

func pvContents(req agent.Request) []string {
	out := make([]string, 0, len(req.Messages))
	for _, m := range req.Messages {
		out = append(out, m.Content)
	}
	return out
}

var (
	// pvLabelRe finds the message ids a request shows: the "[m_…]" that
	// starts a user message line (history, candidates, the current one).
	pvLabelRe = regexp.MustCompile(`(?m)^(?:\[current\] )?\[(m_[a-z2-7]+)\] `)
	// pvReplyRe and pvMarkerRe find the references: a user header's
	// "replying to m_…", and the quote marker of an assistant message.
	pvReplyRe  = regexp.MustCompile(`(?m)^(?:\[current\] )?\[m_[a-z2-7]+\] [^\n]*? replying to (m_[a-z2-7]+):`)
	pvMarkerRe = regexp.MustCompile(`^\[persona-reply:(m_[a-z2-7]+)\]`)
	// pvLineRe splits a user line into its label and its body.
	pvLineRe = regexp.MustCompile(`(?s)^\[(m_[a-z2-7]+)\] [^\n]*?\(u_[a-z2-7]+\)(?: replying to [^:]+)?: ?(.*)$`)
	// pvSnippetRe is a recalled earlier message of the memory block.
	pvSnippetRe = regexp.MustCompile(`^- .+? said (?:earlier today|yesterday|\d+ days ago|on \d{4}-\d{2}-\d{2}): (.*)$`)
	pvIdentRe   = regexp.MustCompile(`(?m)^You are (u_[a-z2-7]+) in this group \((g_[a-z2-7]+)\)\.\nSpeaker: `)
	pvMentionRe = regexp.MustCompile(`@(?:u_[a-z2-7]+|everyone)`)
	pvNoiseRe   = regexp.MustCompile(`@u_[a-z2-7]+|@everyone|\[persona-(?:reply|at):[^\]]*\]|\[(?:image|voice|video|emoji|file)\]|\s+`)
)

// pvChat is one recorded chat request of the group, with its parts.
type pvChat struct {
	msgs    []agent.Message
	current string
	// history are the bodies of the messages before the system tail, by
	// role; labels the message ids the request shows.
	history []string
	labels  map[string]bool
	memory  []string // the memory block's messages
}

func (r *pvRun) groupChats(t *testing.T) []pvChat {
	var out []pvChat
	for _, q := range r.model.requests() {
		if q.purpose != agent.PurposeChat || !strings.Contains(q.session, ":group:") {
			continue
		}
		c := pvChat{msgs: q.req.Messages, labels: map[string]bool{}}
		for _, m := range q.req.Messages {
			switch {
			case m.Role == agent.RoleUser && strings.HasPrefix(m.Content, "[current] "):
				c.current = m.Content
			case m.Role == agent.RoleUser:
				if mm := pvLineRe.FindStringSubmatch(m.Content); mm != nil {
					c.history = append(c.history, mm[2])
				}
			case m.Role == agent.RoleAssistant && m.Content != "":
				c.history = append(c.history, m.Content)
			case m.Role == agent.RoleSystem && strings.Contains(m.Content, "[Memory"):
				c.memory = append(c.memory, m.Content)
			}
			if m.Role == agent.RoleUser {
				for _, l := range pvLabelRe.FindAllStringSubmatch(m.Content, -1) {
					c.labels[l[1]] = true
				}
			}
		}
		require.NotEmpty(t, c.current, "a chat request without the current message")
		out = append(out, c)
	}
	require.NotEmpty(t, out)
	return out
}

// find returns the first group chat request whose current message
// contains s.
func pvFindChat(t *testing.T, chats []pvChat, s string) pvChat {
	t.Helper()
	for _, c := range chats {
		if strings.Contains(c.current, s) {
			return c
		}
	}
	require.Failf(t, "no chat request", "for the current message %q", s)
	return pvChat{}
}

// label returns the id a request shows for the user line containing s.
func (c pvChat) label(t *testing.T, s string) string {
	t.Helper()
	for _, m := range c.msgs {
		if m.Role == agent.RoleUser && strings.Contains(m.Content, s) {
			if mm := pvLabelRe.FindStringSubmatch(m.Content); mm != nil {
				return mm[1]
			}
		}
	}
	require.Failf(t, "no history line", "containing %q", s)
	return ""
}

// TestPromptsReadRight checks the prompts of the privacy scenario at the
// pipeline level (issue 17, point 3): recall never repeats what the
// history shows, one flat memory block, the bot's own alias and the names
// it was called by in the system tail, threading of the bot's replies,
// "@everyone", clean spacing.
func TestPromptsReadRight(t *testing.T) {
	t.Parallel()
	r := runPrivacyScenario(t, "")
	chats := r.groupChats(t)

	t.Run("recall never repeats the history", func(t *testing.T) {
		snippets := 0
		for _, c := range chats {
			require.LessOrEqual(t, len(c.memory), 1, "one memory block: %q", c.memory)
			if len(c.memory) == 0 {
				continue
			}
			lines := strings.Split(c.memory[0], "\n")
			require.Equal(t, "[Memory, may be outdated]", lines[0], "one title")
			seen := map[string]bool{}
			for _, l := range lines[1:] {
				require.True(t, strings.HasPrefix(l, "- "), "a flat line: %q", l)
				require.False(t, strings.HasPrefix(l, "- -") || strings.HasPrefix(l, "- [Memory"), "a nested line: %q", l)
				require.False(t, seen[l], "a line twice: %q", l)
				seen[l] = true
				mm := pvSnippetRe.FindStringSubmatch(l)
				if mm == nil {
					continue
				}
				snippets++
				text := strings.TrimSuffix(mm[1], "…")
				norm := pvNoiseRe.ReplaceAllString(text, "")
				for _, h := range c.history {
					hn := pvNoiseRe.ReplaceAllString(h, "")
					require.False(t, norm != "" && (hn == norm || strings.HasSuffix(mm[1], "…") && strings.HasPrefix(hn, norm)),
						"the recalled %q repeats the history line %q of the same request (current %q)", l, h, c.current)
				}
			}
		}
		require.Positive(t, snippets, "no request recalled an earlier message")
	})

	t.Run("identity line", func(t *testing.T) {
		var routerBot string
		for _, q := range r.model.requests() {
			if q.purpose == agent.PurposeRouter && strings.Contains(q.session, ":group:") {
				mm := regexp.MustCompile(`"bot":\{"speaker":"(u_[a-z2-7]+)"`).FindStringSubmatch(pvLastUser(q.req))
				require.NotNil(t, mm, "the router request names the bot")
				routerBot = mm[1]
				break
			}
		}
		require.NotEmpty(t, routerBot)
		for _, c := range chats {
			var tail []string
			for _, m := range c.msgs {
				if mm := pvIdentRe.FindStringSubmatch(m.Content); mm != nil {
					tail = mm
				}
			}
			require.NotNil(t, tail, "no identity line in the request for %q", c.current)
			require.Equal(t, routerBot, tail[1], "the bot's alias is the same for every purpose")
		}
		// The speaker used the bot's name (alias trigger): the tail says so.
		c := pvFindChat(t, chats, "你在吗")
		found := false
		for _, m := range c.msgs {
			if strings.Contains(m.Content, "Speaker: 小雨 (u_") && strings.Contains(m.Content, "They called you 派派.") {
				found = true
			}
		}
		require.True(t, found, "the tail names the bot's name the speaker used")
		// The current message mentions the bot by its alias.
		require.Contains(t, pvFindChat(t, chats, "列一下装备清单").current, "@"+routerBot+" 列一下装备清单")
	})

	t.Run("threading", func(t *testing.T) {
		markers := 0
		for _, c := range chats {
			for _, m := range c.msgs {
				var refs [][]string
				switch m.Role {
				case agent.RoleUser:
					refs = pvReplyRe.FindAllStringSubmatch(m.Content, -1)
				case agent.RoleAssistant:
					refs = pvMarkerRe.FindAllStringSubmatch(m.Content, -1)
					markers += len(refs)
				}
				for _, ref := range refs {
					require.True(t, c.labels[ref[1]], "reference to %s, which the request does not show, in %q", ref[1], m.Content)
				}
			}
		}
		require.Positive(t, markers, "no assistant message shows the message it answered")
		// The bot's reply to g09 shows g09 in the next direct turn's prompt.
		c := pvFindChat(t, chats, "你在吗")
		g09 := c.label(t, "帮我叫一下阿杰")
		found := false
		for _, m := range c.msgs {
			if m.Role == agent.RoleAssistant && strings.HasPrefix(m.Content, "[persona-reply:"+g09+"]") {
				found = true
				require.Contains(t, m.Content, "小雨找你")
			}
		}
		require.True(t, found, "the bot's reply to g09 shows which message it answered")
		// A quote of a user's message names the quoted message.
		c = pvFindChat(t, chats, "谁说得对")
		g07 := c.label(t, "周六早上8点地铁站集合")
		require.Contains(t, strings.Join(pvContents(agent.Request{Messages: c.msgs}), "\n"), "replying to "+g07+": got it")
	})

	t.Run("@all is @everyone", func(t *testing.T) {
		c := pvFindChat(t, chats, "谁说得对")
		var line string
		for _, m := range c.msgs {
			if strings.Contains(m.Content, "周六早上8点地铁站集合") {
				line = m.Content
			}
		}
		require.Regexp(t, `\): @everyone 周六早上8点地铁站集合，别迟到$`, line)
		seen := false
		for _, q := range r.model.requests() {
			if q.purpose == agent.PurposeRouter && strings.Contains(pvLastUser(q.req), "周六早上8点") {
				seen = true
				require.Contains(t, pvLastUser(q.req), `"text":"@everyone 周六早上8点地铁站集合，别迟到"`)
				require.NotContains(t, pvLastUser(q.req), "@all")
			}
		}
		require.True(t, seen)
	})

	t.Run("spacing", func(t *testing.T) {
		for _, c := range chats {
			for _, m := range c.msgs {
				if m.Role == agent.RoleSystem {
					continue
				}
				require.NotContains(t, m.Content, "  ", "double space in %q", m.Content)
				for _, loc := range pvMentionRe.FindAllStringIndex(m.Content, -1) {
					before, _ := utf8.DecodeLastRuneInString(m.Content[:loc[0]])
					after, _ := utf8.DecodeRuneInString(m.Content[loc[1]:])
					require.False(t, pvWordRune(before) || pvWordRune(after), "a mention touching a word in %q", m.Content)
				}
			}
		}
		for _, q := range r.model.requests() {
			if q.purpose == agent.PurposeRouter {
				require.NotContains(t, pvLastUser(q.req), "  ")
			}
		}
	})
}

func pvWordRune(c rune) bool { return c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c) }
