package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

// The recall benchmark's data set: 1,000,000 history rows in one SQLite
// file, built once per machine (under os.TempDir, reused by later runs
// until the generator or the schema changes; delete the directory to
// rebuild). It is built only by the benchmarks, never by tests.
const (
	benchRows        = 1_000_000
	benchSessions    = 100
	benchBigSession  = 200_000 // rows of session 0; the rest share ~8,080 each
	benchBatch       = 10_000
	benchFacts       = 5_000
	benchDatasetName = "persona-memory-bench-v1"
)

var (
	zhWords = strings.Fields(`今天 明天 昨天 周末 晚上 早上 中午 北京 上海 杭州 深圳 成都 西湖 长城 火锅 咖啡 奶茶 电影 游戏 音乐
		工作 加班 开会 项目 代码 测试 上线 服务器 数据库 程序员 老板 同事 朋友 家人 孩子 猫咪 狗狗 天气 下雨 出差 旅游 机票
		酒店 高铁 地铁 学习 考试 论文 老师 学校 图书馆 跑步 健身 篮球 足球 比赛 吃饭 做饭 外卖 超市 手机 电脑 键盘 显示器
		耳机 相机 拍照 视频 直播 小说 动漫 新闻 股票 基金 房子 搬家 装修 生日 礼物 快递 医院 感冒 睡觉 失眠 开心 难过 无聊
		觉得 可以 已经 还是 因为 所以 但是 如果 我们 你们 他们 什么 怎么 为什么 真的 其实 应该 可能 一起 一下 一点 好像`)
	enWords = strings.Fields(`the a to and of in is it you that for on with this my be have are not at was but just so what
		do can get like go know think time good day today tomorrow weekend night work meeting project code test deploy server
		database sqlite golang python rust docker kubernetes bug fix release coffee tea movie game music travel hotel flight
		train weather rain cat dog friend family birthday gift phone laptop keyboard camera photo video stream book novel anime
		news stock fund house move gym run basketball football match dinner lunch pizza burger sushi noodles happy sad tired
		really actually maybe should could together little bit again later soon hello thanks sorry please yes no ok lol`)
)

// benchText is a short chat message: Chinese (unspaced), English or mixed.
func benchText(r *rand.Rand) string {
	var b strings.Builder
	switch r.IntN(3) {
	case 0:
		for range 3 + r.IntN(8) {
			b.WriteString(zhWords[r.IntN(len(zhWords))])
		}
	case 1:
		for i := range 4 + r.IntN(12) {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(enWords[r.IntN(len(enWords))])
		}
	default:
		for range 3 + r.IntN(6) {
			if r.IntN(3) == 0 {
				b.WriteString(" " + enWords[r.IntN(len(enWords))] + " ")
			} else {
				b.WriteString(zhWords[r.IntN(len(zhWords))])
			}
		}
	}
	return b.String()
}

func benchSession(i int) string {
	return channel.SessionKey("", "onebot", "bot", channel.Chat{Kind: channel.Group, ID: fmt.Sprint(900000 + i)})
}

var (
	benchDBOnce sync.Once
	benchDBPath string
	benchDBErr  error
)

// benchDataset returns the path of the 1M-row database, building it on
// first use.
func benchDataset(b *testing.B) string {
	b.Helper()
	benchDBOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), benchDatasetName)
		path := filepath.Join(dir, fmt.Sprintf("history-%d-v%d.db", benchRows, SchemaVersion()))
		if _, err := os.Stat(path + ".complete"); err == nil {
			benchDBPath = path
			return
		}
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			benchDBErr = err
			return
		}
		start := time.Now()
		benchDBErr = buildBenchDataset(path)
		if benchDBErr == nil {
			benchDBErr = os.WriteFile(path+".complete", nil, 0o644)
			b.Logf("built %d history rows in %v at %s", benchRows, time.Since(start).Round(time.Second), path)
		}
		benchDBPath = path
	})
	require.NoError(b, benchDBErr)
	return benchDBPath
}

// buildBenchDataset writes the rows in transactions of 10,000 through the
// same upsert (and triggers) the store uses, then indexes them.
func buildBenchDataset(path string) error {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	d, err := Open(path, Options{Clock: clock.NewFake(base.Add(400 * 24 * time.Hour))})
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	r := rand.New(rand.NewPCG(1, 2))
	rows := make([]eventRow, 0, benchBatch)
	for i := 0; i < benchRows; {
		rows = rows[:0]
		for ; len(rows) < benchBatch && i < benchRows; i++ {
			s := 0
			if i >= benchBigSession {
				s = 1 + i%(benchSessions-1)
			}
			chat := channel.Chat{Kind: channel.Group, ID: fmt.Sprint(900000 + s)}
			ev := channel.Event{
				Platform: "onebot", BotID: "bot", Kind: channel.KindMessage, Chat: chat, MessageID: fmt.Sprint(i),
				Time:     base.Add(time.Duration(i) * 30 * time.Second),
				Sender:   channel.Sender{ID: fmt.Sprint(1000 + r.IntN(500)), Name: fmt.Sprintf("user%d", r.IntN(500))},
				Segments: []channel.Segment{channel.Text(benchText(r))},
			}
			ev.SessionKey = benchSession(s)
			er, err := newEventRow(ev.Key(), ev.SessionKey, &ev, memory.In, time.Time{}, ms(ev.Time))
			if err != nil {
				return err
			}
			rows = append(rows, er)
		}
		if err := d.write(context.Background(), func(tx wtx) error {
			for j := range rows {
				if err := upsertEvent(tx, &rows[j], rows[j].eventTime); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	var changes []memory.Change
	for i := range benchFacts {
		s := i % benchSessions
		changes = append(changes, memory.Change{Fact: memory.Fact{
			Scope: memory.ScopeUser, SubjectUserID: fmt.Sprint(1000 + i%500), Key: fmt.Sprintf("k%d", i),
			Content: benchText(r), Confidence: 0.5 + r.Float64()/2, Importance: r.Float64(),
			SessionKey: benchSession(s), ChatKind: "group", Platform: "onebot",
			EventTime: base.Add(time.Duration(i) * time.Hour),
		}})
	}
	if _, err := d.ApplyChanges(context.Background(), changes); err != nil {
		return err
	}
	// Index every history row (the background indexer may have done part
	// of it already).
	for {
		n, err := d.indexPending(context.Background(), nil, searchIndexBatch)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	// Merge the FTS segments as a long-running store would over time.
	return d.write(context.Background(), func(tx wtx) error {
		_, err := tx.exec(`INSERT INTO message_search (message_search) VALUES ('optimize')`)
		return err
	})
}

// BenchmarkMemoryRecall measures memory.Recaller.Recall (structured fact
// filter, FTS4 BM25 over facts and history, decay, MMR) on the 1M-row
// data set, in the big session (200,000 rows) and in a typical one (~8,000
// rows), with Chinese, English and mixed queries. p50-ms and p95-ms are the
// latency percentiles of single recalls.
//
//	go test ./store -run xxx -bench MemoryRecall -benchtime 2000x
func BenchmarkMemoryRecall(b *testing.B) {
	path := benchDataset(b)
	d, err := Open(path, Options{Clock: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))})
	require.NoError(b, err)
	b.Cleanup(func() { _ = d.Close() })
	rc, err := memory.NewRecaller(d, d, memory.RecallConfig{Clock: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))})
	require.NoError(b, err)
	r := rand.New(rand.NewPCG(3, 4))
	queries := make([]string, 64)
	for i := range queries {
		queries[i] = benchText(r)
	}
	for _, tc := range []struct {
		name    string
		session int
	}{{"big-session-200k", 0}, {"typical-session-8k", 7}} {
		b.Run(tc.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			hits := 0
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				out, err := rc.Recall(b.Context(), memory.Query{
					SessionKey: benchSession(tc.session), UserID: fmt.Sprint(1000 + i%500), Text: queries[i%len(queries)],
				})
				lat = append(lat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				hits += len(out.Facts) + len(out.Snippets)
			}
			b.StopTimer()
			rc.Wait()
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(int(float64(len(lat))*p), len(lat)-1)].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.95), "p95-ms")
			b.ReportMetric(float64(hits)/float64(len(lat)), "items/recall")
		})
	}
}

// BenchmarkMemoryIndexWrite measures the cost the search index adds to a
// history write, one Append of a typical message after the other:
//
//   - indexed: the store as shipped; the background search indexer indexes
//     the rows in batches while they come (its writes share the writer), and
//     what is still queued at the end is indexed before the clock stops,
//     so the figure holds the whole cost, amortized;
//   - write-path: the indexer off and nothing indexed: only the write path
//     (the row is stored with its tokens and queued);
//   - no-text: a message without text, nothing to index.
//
// The messages go to 50 chats in turn.
//
//	go test ./store -run xxx -bench MemoryIndexWrite -benchmem
func BenchmarkMemoryIndexWrite(b *testing.B) {
	for _, tc := range []struct {
		name      string
		text      bool
		noIndexer bool
	}{{"indexed", true, false}, {"write-path", true, true}, {"no-text", false, false}} {
		b.Run(tc.name, func(b *testing.B) {
			d, err := Open(filepath.Join(b.TempDir(), "w.db"), Options{NoSearchIndexer: tc.noIndexer})
			require.NoError(b, err)
			defer func() { _ = d.Close() }()
			r := rand.New(rand.NewPCG(5, 6))
			base := time.Now()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				text := ""
				if tc.text {
					text = benchText(r)
				}
				ev := channel.Event{
					Platform: "onebot", BotID: "bot", Kind: channel.KindMessage,
					Chat:      channel.Chat{Kind: channel.Group, ID: fmt.Sprint(i % 50)},
					MessageID: fmt.Sprint(i), Time: base.Add(time.Duration(i) * time.Millisecond),
					Sender: channel.Sender{ID: "u", Name: ""}, Segments: []channel.Segment{channel.Text(text)},
				}
				ev.SessionKey = channel.SessionKey("", "onebot", "bot", ev.Chat)
				if err := d.Append(b.Context(), memory.Entry{Event: ev}); err != nil {
					b.Fatal(err)
				}
			}
			if !tc.noIndexer {
				drainSearchIndex(b, d)
			}
			b.StopTimer() // before the deferred Close (and its WAL checkpoint)
		})
	}
}

// BenchmarkMemorySearchIndex measures the search indexer: one op is one
// queued history row moved into the FTS4 index, in passes of the given
// batch size (512 is what the store uses; 1 is what indexing each message
// on its own costs), with the rows spread over the given number of
// sessions. FTS4 writes one index segment per session per pass (see
// search_index.go), so the more sessions share a pass, the less batching
// saves.
//
//	go test ./store -run xxx -bench MemorySearchIndex -benchmem
func BenchmarkMemorySearchIndex(b *testing.B) {
	for _, tc := range []struct{ batch, sessions int }{
		{1, 50}, {searchIndexBatch, 1}, {searchIndexBatch, 50}, {searchIndexBatch, 1000},
	} {
		b.Run(fmt.Sprintf("batch-%d/sessions-%d", tc.batch, tc.sessions), func(b *testing.B) {
			d, err := Open(filepath.Join(b.TempDir(), "i.db"), Options{NoSearchIndexer: true})
			require.NoError(b, err)
			defer func() { _ = d.Close() }()
			r := rand.New(rand.NewPCG(9, 10))
			base := time.Now()
			rows := make([]eventRow, 0, benchBatch)
			for i := 0; i < b.N; {
				rows = rows[:0]
				for ; len(rows) < benchBatch && i < b.N; i++ {
					ev := channel.Event{
						Platform: "onebot", BotID: "bot", Kind: channel.KindMessage,
						Chat:      channel.Chat{Kind: channel.Group, ID: fmt.Sprint(i % tc.sessions)},
						MessageID: fmt.Sprint(i), Time: base.Add(time.Duration(i) * time.Millisecond),
						Sender:   channel.Sender{ID: fmt.Sprint(r.IntN(500)), Name: fmt.Sprintf("user%d", r.IntN(500))},
						Segments: []channel.Segment{channel.Text(benchText(r))},
					}
					ev.SessionKey = channel.SessionKey("", "onebot", "bot", ev.Chat)
					er, err := newEventRow(ev.Key(), ev.SessionKey, &ev, memory.In, time.Time{}, ms(ev.Time))
					require.NoError(b, err)
					rows = append(rows, er)
				}
				require.NoError(b, d.write(b.Context(), func(tx wtx) error {
					for j := range rows {
						if err := upsertEvent(tx, &rows[j], rows[j].eventTime); err != nil {
							return err
						}
					}
					return nil
				}))
			}
			b.ReportAllocs()
			b.ResetTimer()
			done := 0
			for done < b.N {
				n, err := d.indexPending(b.Context(), nil, tc.batch)
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					b.Fatalf("%d rows indexed of %d", done, b.N)
				}
				done += n
			}
			b.StopTimer() // before the deferred Close (and its WAL checkpoint)
		})
	}
}

// BenchmarkMemoryTokenize measures the Go-side tokenization of one message.
func BenchmarkMemoryTokenize(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	texts := make([]string, 256)
	for i := range texts {
		texts[i] = benchText(r)
	}
	i := 0
	for b.Loop() {
		_ = memory.IndexText(texts[i%len(texts)])
		i++
	}
}
