package route_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate/gatetest"
	"github.com/personakit/persona/route"
)

// The busy group of the replay: seven people with ten-digit QQ numbers,
// the bot and the group's own number.
const (
	busyBot     = "3344556677"
	busyGroup   = "738291045"
	busySession = "default:onebot:" + busyBot + ":group:" + busyGroup
)

var busyPeople = []channel.Sender{
	{ID: "2734019856", Name: "阿杰"}, {ID: "1928374650", Name: "Lily"}, {ID: "1499449412", Name: "小王"},
	{ID: "3051827364", Name: "Tom"}, {ID: "1120394857", Name: "老陈"}, {ID: "2847561039", Name: "Mia"},
	{ID: "1765432980", Name: "豆豆"},
}

// busyLine is one message of the script: from is an index of busyPeople
// (-1: the bot); "{@N}" in text is a mention of busyPeople[N] ("{@bot}",
// "{@all}"); quote is the 1-based script position of the quoted message
// (0: none); img puts an image (with a URL full of ids) first.
type busyLine struct {
	from  int
	text  string
	quote int
	img   bool
}

var busyScript = []busyLine{
	{from: 0, text: "今天晚上谁去吃火锅？"},
	{from: 1, text: "me! which place?"},
	{from: 2, text: "上次那家海底捞排队排了一个小时"},
	{from: 3, text: "hotpot again? we had it last week lol"},
	{from: 4, text: "看看这个新开的店", img: true},
	{from: 5, text: "ooh that looks nice, where is it?"},
	{from: 4, text: "在人民广场地铁站旁边", quote: 6},
	{from: 6, text: "我今天加班，去不了 😭"},
	{from: 0, text: "{@6} 又加班？"},
	{from: 6, text: "没办法，项目要上线了"},
	{from: 1, text: "{@0} what time?"},
	{from: 0, text: "七点吧，大家看看"},
	{from: 3, text: "7 works for me"},
	{from: 2, text: "{@bot} 你觉得火锅还是烤肉好？"},
	{from: -1, text: "火锅！天冷了正合适", quote: 14},
	{from: 5, text: "haha even the bot agrees"},
	{from: 4, text: "我的QQ是 1120394857，加我一下拉群"},
	{from: 3, text: "added. btw 群号 738291045 is this group, right?"},
	{from: 1, text: "my cat says hi", img: true},
	{from: 2, text: "好可爱！什么品种？", quote: 19},
	{from: 1, text: "british shorthair, she's 3 now"},
	{from: 0, text: "{@all} 今晚七点人民广场，别迟到"},
	{from: 6, text: "收到"},
	{from: 5, text: "👍"},
	{from: 3, text: "does anyone know if they take reservations?"},
	{from: 4, text: "可以在大众点评上订"},
	{from: 3, text: "thanks! I'll book for 6 people"},
	{from: 2, text: "7个人吧，算上我"},
	{from: 3, text: "ok 7 then {@2}"},
	{from: 5, text: "Mira 你也来吗？"},
	{from: -1, text: "我去不了，不过祝你们吃得开心", quote: 30},
	{from: 0, text: "lol the bot is so polite"},
	{from: 1, text: "speaking of which, anyone watching the game tonight?"},
	{from: 3, text: "which one? NBA?"},
	{from: 1, text: "yes Lakers vs Warriors"},
	{from: 2, text: "我看，但是吃饭的时候怎么看"},
	{from: 6, text: "手机上看呗"},
	{from: 4, img: true},
	{from: 4, text: "这是上周拍的夕阳"},
	{from: 5, text: "beautiful! where was that taken?"},
	{from: 4, text: "外滩", quote: 40},
	{from: 0, text: "外滩晚上人太多了"},
	{from: 1, text: "true, went there on national day, never again"},
	{from: 3, text: "haha same"},
	{from: 2, text: "有人知道怎么退信用卡年费吗"},
	{from: 6, text: "打客服电话就行，说不想用了一般会免"},
	{from: 2, text: "好的谢谢 {@6}"},
	{from: 5, text: "anyone have a good book recommendation?"},
	{from: 3, text: "Three-Body Problem, if you haven't read it"},
	{from: 5, text: "already did! loved it"},
	{from: 0, text: "《活着》，余华的，很短但很好"},
	{from: 1, text: "+1 for 活着"},
	{from: 5, text: "ok adding it to my list", quote: 51},
	{from: 4, text: "{@1} 上次借的充电宝记得还我"},
	{from: 1, text: "哈哈好的明天带给你", quote: 54},
	{from: 3, text: "is the weather going to be ok tonight?"},
	{from: 2, text: "天气预报说有小雨"},
	{from: 0, text: "带伞 ☂️"},
	{from: -1, text: "记得带伞，晚上降温到10度左右"},
	{from: 6, text: "加班的晚饭", img: true},
	{from: 5, text: "辛苦了", quote: 60},
	{from: 6, text: "习惯了 😂"},
	{from: 3, text: "{@6} we'll bring you some takeout"},
	{from: 6, text: "thx Tom!"},
	{from: 1, text: "btw 2734019856 is 阿杰's QQ if anyone needs it"},
	{from: 0, text: "别乱发我的号 😂"},
	{from: 1, text: "sorry lol"},
	{from: 2, text: "我到人民广场了，你们呢"},
	{from: 0, text: "马上到"},
	{from: 3, text: "5 min away"},
	{from: 5, text: "stuck on line 2, 10 min"},
	{from: 4, text: "已经在排队了", img: true},
	{from: 1, text: "on my way!"},
	{from: 2, text: "服务员说还要等20分钟"},
	{from: 0, text: "那我们先点饮料吧"},
	{from: 5, text: "that was so good"},
	{from: 3, text: "下次还来"},
	{from: 1, text: "group photo!", img: true},
	{from: 6, text: "羡慕😭"},
	{from: 0, text: "{@6} 下次一定叫你"},
	{from: 4, text: "谁帮忙把照片发群相册"},
	{from: 1, text: "done"},
	{from: 2, text: "明天周六有人打羽毛球吗"},
	{from: 3, text: "count me in"},
	{from: 5, text: "what time?"},
	{from: 2, text: "上午十点，体育馆", quote: 85},
	{from: 0, text: "我起不来哈哈"},
	{from: 4, text: "年轻人要多运动", quote: 87},
	{from: 0, text: "好的陈叔"},
	{from: 1, text: "I'll come if it's not raining"},
	{from: 3, text: "indoor court, rain doesn't matter"},
	{from: 1, text: "oh right 😅"},
	{from: 5, text: "Mira, do you play badminton?"},
	{from: -1, text: "我只会在群里给你们加油 🏸", quote: 93},
	{from: 6, text: "哈哈哈"},
	{from: 2, text: "ok 明天见"},
}

// busyStart is when the replayed conversation begins.
var busyStart = time.Date(2026, 3, 6, 18, 2, 0, 0, time.UTC)

// busyEvents renders busyScript as events, oldest first.
func busyEvents() []channel.Event {
	evs := make([]channel.Event, 0, len(busyScript))
	at := busyStart
	for i, l := range busyScript {
		at = at.Add(time.Duration(5+(i*37)%55) * time.Second)
		ev := channel.Event{Platform: "onebot", BotID: busyBot, Kind: channel.KindMessage, SessionKey: busySession,
			Chat: channel.Chat{Kind: channel.Group, ID: busyGroup}, MessageID: strconv.Itoa(1873000000 + i*7331), Time: at}
		if l.from < 0 {
			ev.Kind, ev.Sender = channel.KindSelf, channel.Sender{ID: busyBot, Name: "Mira", IsBot: true}
		} else {
			ev.Sender = busyPeople[l.from]
		}
		if l.img {
			ev.Segments = append(ev.Segments, channel.Image(channel.Media{URL: "https://multimedia.nt.qq.com.cn/download?appid=1407&fileid=" +
				busyGroup + "_" + ev.Sender.ID + "&rkey=CAQSKAB6&uin=" + ev.Sender.ID}))
		}
		if l.quote > 0 {
			q := &evs[l.quote-1]
			ev.Segments = append(ev.Segments, channel.Quote(q.MessageID))
			ev.Quoted = &channel.Quoted{MessageID: q.MessageID, Sender: q.Sender, Text: q.Text(), FromBot: q.Kind == channel.KindSelf}
		}
		ev.Segments = append(ev.Segments, busySegments(l.text)...)
		evs = append(evs, ev)
	}
	return evs
}

// busySegments parses the "{@N}" mentions of a script line.
func busySegments(text string) []channel.Segment {
	var out []channel.Segment
	for text != "" {
		i := strings.Index(text, "{@")
		if i < 0 {
			out = append(out, channel.Text(text))
			break
		}
		if i > 0 {
			out = append(out, channel.Text(text[:i]))
		}
		j := strings.IndexByte(text, '}')
		switch who := text[i+2 : j]; who {
		case "bot":
			out = append(out, channel.Mention(busyBot))
		case "all":
			out = append(out, channel.Mention(agent.MentionAll))
		default:
			n, _ := strconv.Atoi(who)
			out = append(out, channel.Mention(busyPeople[n].ID))
		}
		text = text[j+1:]
	}
	return out
}

// busyRecent is how many earlier events each rating gets.
const busyRecent = 2*route.DefaultTranscriptMessages + 4

// recordingRouterModel answers every router request with a rating of each
// candidate it shows (by the id the request gives it), not directed, chat
// score 0.3 (so every rating ends ignored_chat_score and nothing feeds
// back into the conversation).
func recordingRouterModel() *agenttest.Model {
	return agenttest.New().Otherwise(agenttest.Func(func(_ context.Context, req agent.Request) (*agent.Response, error) {
		var p struct {
			Candidates []struct {
				MessageID string `json:"message_id"`
			} `json:"candidates"`
		}
		body := req.Messages[1].Content
		if err := json.Unmarshal([]byte(body[strings.Index(body, "{"):]), &p); err != nil {
			return nil, err
		}
		var b strings.Builder
		b.WriteString(`{"candidates":[`)
		for i, c := range p.Candidates {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"message_id":%q,"relevance":{"directed":"no","reason":"r"},"chat_in":{"score":0.3,"reason":"s"}}`, c.MessageID)
		}
		b.WriteString("]}")
		return &agent.Response{Text: b.String()}, nil
	}))
}

// replayBusy plays the busy group through a ModelRouter: every message no
// direct trigger catches is rated, with the busyRecent events before it,
// two seconds after it arrived. It returns the decisions.
func replayBusy(t testing.TB, ctx context.Context, model agent.Model, mod func(c *route.Config)) []route.Decision {
	t.Helper()
	clk := clock.NewFake(busyStart)
	cfg := route.Config{Model: model, Flags: gatetest.NewFlags(), Clock: clk, Aliases: []string{"Mira", "米拉"}}
	if mod != nil {
		mod(&cfg)
	}
	r, err := route.New(cfg)
	require.NoError(t, err)
	id := route.Identity{BotID: busyBot, Aliases: cfg.Aliases}
	evs := busyEvents()
	var out []route.Decision
	for i := range evs {
		ev := evs[i]
		if ev.Kind == channel.KindSelf || route.Classify(&ev, id, route.DefaultTriggers()) != "" {
			continue
		}
		clk.Set(ev.Time.Add(2 * time.Second))
		d, err := r.Route(ctx, route.Input{Event: ev, SessionKey: busySession, Recent: evs[max(0, i-busyRecent):i]})
		require.NoError(t, err)
		out = append(out, d)
	}
	return out
}

// requestText is a request as prompt input: the texts of its messages in
// order (the system prompt first), one after another.
func requestText(req agent.Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

// callCost is the size of one request and the part of it no prefix cache
// would cover: the bytes after the prefix it shares with the previous
// request.
type callCost struct {
	Bytes, Uncached int
}

// requestCosts measures consecutive requests (the first one is all
// uncached).
func requestCosts(reqs []agent.Request) []callCost {
	out := make([]callCost, len(reqs))
	prev := ""
	for i, req := range reqs {
		s := requestText(req)
		n := 0
		for n < len(s) && n < len(prev) && s[n] == prev[n] {
			n++
		}
		out[i] = callCost{Bytes: len(s), Uncached: len(s) - n}
		prev = s
	}
	return out
}

// costSummary sums the costs from the second request on: the share of
// bytes covered by the previous request's prefix, and the mean request and
// uncached bytes.
func costSummary(costs []callCost) (shared float64, meanBytes, meanUncached int) {
	var total, unc int
	for _, c := range costs[1:] {
		total += c.Bytes
		unc += c.Uncached
	}
	n := len(costs) - 1
	return float64(total-unc) / float64(total), total / n, unc / n
}

func TestRouterReplayIsCacheable(t *testing.T) {
	t.Parallel()
	scope, err := agent.NewScope(busySession, []byte("0123456789abcdef0123456789abcdef"), nil)
	require.NoError(t, err)
	model := recordingRouterModel()
	ds := replayBusy(t, agent.WithScope(t.Context(), scope), model, nil)
	reqs := model.Requests()
	require.Len(t, reqs, len(ds), "one request per rating")
	require.GreaterOrEqual(t, len(reqs), 60)
	for _, d := range ds {
		require.Equal(t, route.IgnoredChatScore, d.Code, d.Reason)
	}
	costs := requestCosts(reqs)
	shared, meanBytes, meanUncached := costSummary(costs)
	minShared := 1.0
	for i, c := range costs[1:] {
		s := 1 - float64(c.Uncached)/float64(c.Bytes)
		minShared = min(minShared, s)
		if testing.Verbose() {
			t.Logf("call %3d: %5d bytes, %5d uncached (%4.1f %% shared)", i+2, c.Bytes, c.Uncached, 100*s)
		}
	}
	t.Logf("%d router requests: %.1f %% of the bytes shared with the previous request (lowest %.1f %%); %d bytes per request, %d uncached (~%d tokens)",
		len(reqs), 100*shared, 100*minShared, meanBytes, meanUncached, meanUncached/4)
	require.GreaterOrEqual(t, shared, 0.80)
}
