package persona_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/store"
)

// The economy benchmark of issue 17 (point 4): a busy group conversation
// played through the whole pipeline (memory on) with a scripted model that
// records every request, and what it costs per incoming message: model
// requests and input tokens per purpose, and the input not covered by the
// longest common prefix with the previous request of the same purpose
// (what a provider's prefix cache cannot reuse). Tokens are bytes/4 of the
// JSON-serialized agent.Request. Run it with
//
//	go test -run TestEconomy -v .
//
// It asserts the goals: consecutive router requests share at least
// 80 % of their bytes, and the uncached input is at most 300 tokens per
// incoming message over all purposes.

const (
	ecoBot   = "3141592653"
	ecoGroup = "738291045"
	// ecoRouterShare and ecoUncached are the goals.
	ecoRouterShare = 0.80
	ecoUncached    = 300.0
)

var ecoPeople = []channel.Sender{
	{ID: "1928374650", Name: "阿杰"},
	{ID: "2734019856", Name: "小雨"},
	{ID: "3049581726", Name: "Leo"},
	{ID: "4158203967", Name: "王磊"},
	{ID: "5261937048", Name: "Mia"},
	{ID: "6370482915", Name: "老陈", Role: channel.RoleAdmin},
	{ID: "7483920561", Name: "Kate"},
}

// ecoLine is one incoming message of the conversation.
type ecoLine struct {
	from int
	gap  int // seconds since the previous message
	text string
	// bot mentions the bot; mention is a person mentioned; quote the
	// index of a quoted earlier line (-1: none; quoteBot: the bot's reply
	// to it); image attaches a photo; all mentions everyone.
	bot      bool
	mention  int
	quote    int
	quoteBot bool
	image    bool
	all      bool
}

func eco(from, gap int, text string) ecoLine {
	return ecoLine{from: from, gap: gap, text: text, mention: -1, quote: -1}
}

func (l ecoLine) toBot() ecoLine      { l.bot = true; return l }
func (l ecoLine) at(p int) ecoLine    { l.mention = p; return l }
func (l ecoLine) re(i int) ecoLine    { l.quote = i; return l }
func (l ecoLine) reBot(i int) ecoLine { l.quote, l.quoteBot = i, true; return l }
func (l ecoLine) withImage() ecoLine  { l.image = true; return l }
func (l ecoLine) toEveryone() ecoLine { l.all = true; return l }
func ecoIDOf(i int) string            { return fmt.Sprint(1846302957 + i*7919) }
func ecoImageURL(from, i int) string {
	return fmt.Sprintf("https://gchat.qpic.cn/gchatpic_new/%s/%s-2534335053-%08X/0?term=2", ecoPeople[from].ID, ecoGroup, i*104729)
}

// ecoConversation is a busy evening in a hiking group: 64 messages from 7
// people, Chinese and English, mostly chatter the router rates, some to
// the bot (mentions, its name, quotes of its replies), with mentions of
// others, quotes, images and an @everyone.
func ecoConversation() []ecoLine {
	const (
		j = iota
		y
		l
		w
		m
		c
		k
	)
	return []ecoLine{
		eco(c, 0, "晚上好，周六九溪徒步的人数统计一下"),
		eco(j, 14, "我去！"),
		eco(y, 9, "+1"),
		eco(l, 22, "count me in 🙋"),
		eco(w, 31, "我也去，上次那条路线从龙井村上去挺好的"),
		eco(m, 18, "this is the map from last time").withImage(),
		eco(k, 12, "looks steep haha").re(5),
		eco(c, 40, "周六早上8点地铁站集合，别迟到").toEveryone(),
		eco(y, 25, "收到"),
		eco(j, 8, "派派 你周六也来吗"),
		eco(l, 35, "what time do we finish? I have dinner plans"),
		eco(w, 16, "大概下午三点吧").re(10),
		eco(l, 11, "perfect, thanks"),
		eco(m, 27, "有人知道山上有没有信号吗"),
		eco(c, 19, "山顶信号一般，半山腰有"),
		eco(k, 44, "should I bring trekking poles?"),
		eco(j, 13, "带上吧，下山的时候好用").at(k),
		eco(y, 29, " 帮我列一下要带的东西").toBot(),
		eco(w, 21, "水至少两升"),
		eco(m, 15, "and sunscreen, the forecast says sunny").re(18),
		eco(c, 38, "天气预报说周六多云转晴"),
		eco(l, 26, "great, no rain then"),
		eco(k, 17, "thanks bot, super helpful").reBot(17),
		eco(j, 52, "周六吃什么？山上有农家乐吗"),
		eco(w, 14, "龙井村有好几家"),
		eco(y, 20, "我想吃笋干烧肉"),
		eco(m, 33, "I'm vegetarian btw, hope there are options"),
		eco(c, 18, "有的，素菜很多").re(26),
		eco(l, 41, " what's the name of the tea they grow there?").toBot(),
		eco(k, 24, "龙井 tea right?"),
		eco(j, 12, "对，西湖龙井"),
		eco(w, 37, "下山可以顺便买点茶叶"),
		eco(y, 16, "我妈就喜欢喝龙井"),
		eco(m, 28, "how much is a box usually?"),
		eco(c, 22, "看品质，一两百到上千都有"),
		eco(j, 45, "Leo 你开车吗").at(l),
		eco(l, 19, "no car this time, taking the metro"),
		eco(w, 23, "我可以拼车，还有两个位置"),
		eco(k, 14, "me please!").re(37),
		eco(y, 18, "我也想拼车").re(37),
		eco(w, 30, "好的，Kate 和小雨跟我").at(k),
		eco(m, 26, "派派 can you remind everyone to bring ID? the tea farm asks for it"),
		eco(c, 34, "对，身份证记得带"),
		eco(j, 17, "哈哈哈 上次有人没带被拦住了"),
		eco(l, 21, "that was me 😂").re(43),
		eco(k, 39, "photos from the last trip are here").withImage(),
		eco(y, 15, "好美").re(45),
		eco(w, 22, "第二张是我拍的"),
		eco(m, 36, "anyone know a good place for sunset photos up there?"),
		eco(c, 25, "山顶往西边看，五点左右"),
		eco(j, 18, " 周六几点日落？").toBot(),
		eco(l, 29, "I'll bring my camera then"),
		eco(y, 14, "我带自拍杆"),
		eco(w, 31, "别带太多东西，走路累"),
		eco(k, 24, "true, last time my bag was way too heavy"),
		eco(m, 17, "thanks for the sunset tip").reBot(50),
		eco(c, 43, "最后确认：周六8点地铁站，不见不散"),
		eco(j, 12, "👌"),
		eco(y, 16, "不见不散！"),
		eco(l, 20, "see you all Saturday"),
		eco(w, 27, "派派 到时候提醒一下大家"),
		eco(m, 19, "is there a group photo plan?"),
		eco(k, 23, "we should do one at the top").re(61),
		eco(c, 35, " 周六早上再在群里提醒一次集合地点").toBot(),
	}
}

// ecoReq is one recorded request.
type ecoReq struct {
	purpose string
	body    []byte
}

// ecoModel answers every purpose as a sensible model would and records
// the requests; the usage it reports counts the uncached prefix.
type ecoModel struct {
	mu      sync.Mutex
	reqs    []ecoReq
	last    map[string][]byte
	busy    atomic.Int64
	replies atomic.Int64
}

func (m *ecoModel) Generate(_ context.Context, req agent.Request) (*agent.Response, error) {
	m.busy.Add(1)
	defer m.busy.Add(-1)
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	cached := ecoCommonPrefix(m.last[req.Purpose], body)
	m.last[req.Purpose] = body
	m.reqs = append(m.reqs, ecoReq{purpose: req.Purpose, body: body})
	m.mu.Unlock()
	text := m.answer(req)
	return &agent.Response{Text: text, Model: "eco", FinishReason: "stop",
		Usage: agent.Usage{InputTokens: len(body) / 4, CachedInputTokens: cached / 4, OutputTokens: len(text) / 4}}, nil
}

func ecoLastUser(req agent.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == agent.RoleUser {
			return req.Messages[i].Content
		}
	}
	return ""
}

var ecoReplies = []string{
	"带水、防晒、雨衣、充电宝和一点零食就够了",
	"那边种的是西湖龙井，明前茶最有名",
	"周六日落大概五点左右，山顶往西看最好",
	"好的，周六早上我会提醒大家8点地铁站集合",
	"我也想去！不过我只能在群里陪你们啦",
	"记得带身份证，茶园门口会查",
	"没问题，到时候我提醒大家",
	"不客气～玩得开心",
}

func (m *ecoModel) answer(req agent.Request) string {
	switch req.Purpose {
	case agent.PurposeRouter:
		return ecoRouterAnswer(ecoLastUser(req))
	case agent.PurposeAudit:
		return `{"closing":{"kind":"none","confidence":0.99},"group_stop":{"requested":false,"confidence":0.99},` +
			`"loop":{"hit":false,"confidence":0.99},"safety":{"score":0.99},` +
			`"quality":{"ok":true,"problems":[],"send_confidence":0.99},"refusal":{"is_refusal":false,"confidence":0.99}}`
	case agent.PurposeDedup:
		return `{"verdict":"keep","confidence":0.99,"text":""}`
	case agent.PurposeMemory:
		return ecoMemoryAnswer(ecoLastUser(req))
	case agent.PurposeSummary:
		return "Topics: the Saturday hike at 九溪, food, tea, car pooling.\nConclusions: meet at 8 at the metro station.\nOpen items: group photo."
	case agent.PurposeClassify:
		return `{"label":"independent","confidence":0.9}`
	}
	return ecoReplies[int(m.replies.Add(1)-1)%len(ecoReplies)]
}

// ecoRouterAnswer rates every candidate as chatter, except questions to
// the group, which it rates high.
func ecoRouterAnswer(user string) string {
	var in struct {
		Candidates []struct {
			MessageID string `json:"message_id"`
			Text      string `json:"text"`
		} `json:"candidates"`
	}
	if i := strings.IndexByte(user, '{'); i >= 0 {
		_ = json.Unmarshal([]byte(user[i:]), &in)
	}
	var b strings.Builder
	b.WriteString(`{"candidates":[`)
	for i, c := range in.Candidates {
		score := 0.15
		if strings.Contains(c.Text, "有人知道") || strings.Contains(strings.ToLower(c.Text), "anyone know") {
			score = 0.97
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"message_id":%q,"relevance":{"directed":"no","reason":"talk between members"},"chat_in":{"score":%.2f,"reason":"small talk"}}`,
			c.MessageID, score)
	}
	b.WriteString(`]}`)
	return b.String()
}

// ecoMemoryAnswer learns a fact from messages that state one.
func ecoMemoryAnswer(user string) string {
	_, msg, _ := strings.Cut(user, "NEW MESSAGE:\n")
	msg, _, _ = strings.Cut(msg, "\n")
	if _, after, ok := strings.Cut(msg, "): "); ok {
		msg = after
	}
	for _, f := range []struct{ word, key, content string }{
		{"vegetarian", "diet", "is vegetarian"},
		{"我妈就喜欢喝龙井", "family_tea", "their mother likes Longjing tea"},
		{"dinner plans", "saturday_evening", "has dinner plans on Saturday evening"},
		{"我带自拍杆", "brings_selfie_stick", "brings a selfie stick to the hike"},
	} {
		if strings.Contains(msg, f.word) {
			return fmt.Sprintf(`{"candidates":[{"op":"upsert","scope":"user","key":%q,"kind":"fact","content":%q,"evidence":%q,`+
				`"source_type":"explicit","confidence":0.95,"importance":0.7}]}`, f.key, f.content, f.word)
		}
	}
	return `{"candidates":[]}`
}

// ecoCommonPrefix returns the length of the longest common prefix of a and b.
func ecoCommonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// ecoFigures are the costs of a run.
type ecoFigures struct {
	messages int
	// per purpose: requests, input bytes, uncached input bytes
	requests map[string]int
	input    map[string]int
	uncached map[string]int
	// routerShared and routerBytes sum the common prefixes and the sizes
	// of consecutive router requests (from the second on).
	routerShared, routerBytes int
}

func ecoFiguresOf(reqs []ecoReq, messages int) ecoFigures {
	f := ecoFigures{messages: messages, requests: map[string]int{}, input: map[string]int{}, uncached: map[string]int{}}
	last := map[string][]byte{}
	for _, r := range reqs {
		prev, seen := last[r.purpose]
		lcp := ecoCommonPrefix(prev, r.body)
		f.requests[r.purpose]++
		f.input[r.purpose] += len(r.body)
		f.uncached[r.purpose] += len(r.body) - lcp
		if r.purpose == agent.PurposeRouter && seen {
			f.routerShared += lcp
			f.routerBytes += len(r.body)
		}
		last[r.purpose] = r.body
	}
	return f
}

func (f ecoFigures) perMessage(bytes int) float64 { return float64(bytes) / 4 / float64(f.messages) }

func (f ecoFigures) totalUncached() float64 {
	n := 0
	for _, v := range f.uncached {
		n += v
	}
	return f.perMessage(n)
}

func (f ecoFigures) routerShare() float64 {
	if f.routerBytes == 0 {
		return 0
	}
	return float64(f.routerShared) / float64(f.routerBytes)
}

// table renders the figures as a Markdown table.
func (f ecoFigures) table() string {
	purposes := make([]string, 0, len(f.requests))
	for p := range f.requests {
		purposes = append(purposes, p)
	}
	sort.Slice(purposes, func(i, j int) bool { return f.input[purposes[i]] > f.input[purposes[j]] })
	var b strings.Builder
	b.WriteString("| purpose | requests | requests / message | input tokens / message | uncached tokens / message |\n")
	b.WriteString("|---|---:|---:|---:|---:|\n")
	var reqs, in, unc int
	for _, p := range purposes {
		fmt.Fprintf(&b, "| %s | %d | %.2f | %.0f | %.0f |\n", p, f.requests[p], float64(f.requests[p])/float64(f.messages),
			f.perMessage(f.input[p]), f.perMessage(f.uncached[p]))
		reqs += f.requests[p]
		in += f.input[p]
		unc += f.uncached[p]
	}
	fmt.Fprintf(&b, "| **all** | %d | %.2f | %.0f | %.0f |\n", reqs, float64(reqs)/float64(f.messages), f.perMessage(in), f.perMessage(unc))
	fmt.Fprintf(&b, "\nconsecutive router requests share %.1f %% of their bytes (%d messages)\n", 100*f.routerShare(), f.messages)
	return b.String()
}

// TestEconomy plays the conversation and reports (and checks) what it
// costs. It is repeatable: one message at a time on a simulated clock,
// each decided (and its memory work done) before the next arrives.
func TestEconomy(t *testing.T) {
	t.Parallel()
	lines := ecoConversation()
	clk := clock.NewFake(time.Date(2026, 11, 25, 20, 0, 0, 0, time.UTC))
	ch := chantest.New(chantest.Config{Platform: "onebot", BotID: ecoBot, Clock: clk})
	db, err := store.Open(t.TempDir()+"/persona.db", store.Options{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	model := &ecoModel{last: map[string][]byte{}}
	var (
		mu       sync.Mutex
		outcomes = map[string]inbound.Outcome{}
	)
	p, err := persona.New(persona.Options{
		Channels: []channel.Channel{ch}, DB: db, DataDir: t.TempDir(),
		Persona: "You are 派派, a cheerful regular of a Hangzhou hiking group. You know the trails around West Lake, " +
			"the tea villages and the weather. You keep replies short and warm, in the language people write to you in.",
		Aliases: []string{"派派"}, Model: model, Memory: true, Clock: clk, NoPacing: true,
		Logger: slog.New(slog.DiscardHandler),
		OnOutcome: func(id string, o inbound.Outcome) {
			mu.Lock()
			outcomes[id] = o
			mu.Unlock()
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, p.Close())
	})
	group := channel.Chat{Kind: channel.Group, ID: ecoGroup}
	replies := map[int]chantest.Sent{} // line → the bot's first reply
	said := map[int]channel.Event{}    // line → its event
	codes := map[string]int{}
	for i, ln := range lines {
		clk.Advance(time.Duration(ln.gap) * time.Second)
		var opts []chantest.SayOption
		opts = append(opts, chantest.WithMessageID(ecoIDOf(i)))
		if ln.quote >= 0 {
			// The quoted message as the adapter's cache gives it.
			q := said[ln.quote]
			quoted := channel.Quoted{MessageID: q.MessageID, Sender: q.Sender, Text: q.Text(), Segments: q.Segments}
			if ln.quoteBot {
				r, ok := replies[ln.quote]
				require.True(t, ok, "line %d quotes a reply the bot never sent", i)
				quoted = channel.Quoted{MessageID: r.Receipt.MessageIDs[0], Sender: channel.Sender{ID: ecoBot, IsBot: true},
					Text: r.Out.Text, FromBot: true}
			}
			opts = append(opts, chantest.QuoteOf(quoted.MessageID), func(ev *channel.Event) { ev.Quoted = &quoted })
		}
		if ln.bot {
			opts = append(opts, chantest.MentionBot())
		}
		if ln.all {
			opts = append(opts, chantest.MentionUser("all"))
		}
		if ln.mention >= 0 {
			opts = append(opts, chantest.MentionUser(ecoPeople[ln.mention].ID))
		}
		if ln.image {
			opts = append(opts, chantest.WithSegments(channel.Segment{Type: channel.SegImage,
				Media: &channel.Media{URL: ecoImageURL(ln.from, i), MIME: "image/jpeg"}}))
		}
		sent := len(ch.Sent())
		ev, err := ch.Say(t.Context(), group, ecoPeople[ln.from], ln.text, opts...)
		require.NoError(t, err)
		var o inbound.Outcome
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			var ok bool
			o, ok = outcomes[ev.Key()]
			return ok
		}, 20*time.Second, time.Millisecond, "no outcome for line %d", i)
		codes[string(o.Code)]++
		said[i] = ev
		if s := ch.Sent(); len(s) > sent && len(s[sent].Receipt.MessageIDs) > 0 {
			replies[i] = s[sent]
		}
		// The memory work of a reply is done before the next message.
		require.Eventually(t, func() bool {
			c, err := db.JobCounts(t.Context())
			return err == nil && c["pending"] == 0 && c["leased"] == 0 && model.busy.Load() == 0
		}, 20*time.Second, time.Millisecond, "memory work after line %d", i)
	}
	model.mu.Lock()
	reqs := slices.Clone(model.reqs)
	model.mu.Unlock()
	f := ecoFiguresOf(reqs, len(lines))
	t.Logf("outcomes: %v", codes)
	t.Logf("economy, %d incoming messages:\n%s", len(lines), f.table())
	t.Logf("uncached input per incoming message: %.0f tokens (goal ≤ %.0f); router share %.1f %% (goal ≥ %.0f %%)",
		f.totalUncached(), ecoUncached, 100*f.routerShare(), 100*ecoRouterShare)

	require.GreaterOrEqual(t, len(lines), 60)
	require.Positive(t, f.requests[agent.PurposeRouter])
	require.Positive(t, f.requests[agent.PurposeChat])
	require.GreaterOrEqual(t, f.routerShare(), ecoRouterShare, "consecutive router requests share too little")
	require.LessOrEqual(t, f.totalUncached(), ecoUncached, "uncached input per incoming message")
}
