package onebot_test

import (
	"testing"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
)

var fuzzSeeds = []string{
	"",
	"hello",
	"[CQ:face,id=178]看看我刚拍的照片[CQ:image,file=123.jpg]",
	"&#91;第一部分&#93;[CQ:image,file=123.jpg]图片之后的部分，表情：[CQ:face,id=123]",
	"[CQ:share,title=震惊&#44;小伙睡觉前居然...,url=http://baidu.com/?a=1&amp;b=2]",
	"[CQ:node,user_id=10001000,nickname=某人,content=&#91;CQ:face&#44;id=123&#93;哈喽～]",
	"[CQ:share,title=标题中有=等号,url=http://baidu.com]",
	"- &#91;x&#93; 使用 `&amp;data` 获取地址",
	"[CQ:[CQ:face]", "[CQ:", "[[CQ:at,qq=1]]", "&amp;#91;", "[CQ:text,text=a]b", "\xff[CQ:x,\xfe=1]",
	"[CQ:image,file=S.gif,sub_type=1,summary=&#91;动画表情&#93;,url=https://s.example/s.gif?a=1&amp;b=2]",
	"[CQ:image,file=S.image,subType=1]",
	"[CQ:mface,emoji_id=7dd2,emoji_package_id=235125,key=k,summary=&#91;开心&#93;,url=https://gxh.example/raw300.gif]",
	"[CQ:record,file=v.amr,url=https://v.example/v.amr,file_size=900]",
	"[CQ:video,file=https://v.example/m.mp4]",
	"[CQ:file,file=doc.pdf,file_id=/f-1,file_size=2048,file_name=doc.pdf]",
	"[CQ:image,file=base64://aGk=]",
	"[CQ:image,file=file:///tmp/a.png,sub_type=1x]",
}

// FuzzParseCQ: ParseCQ never panics, always returns a valid segment list,
// and parse ∘ render is the identity on it.
func FuzzParseCQ(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m := onebot.ParseCQ(s)
		if ok, why := onebot.ValidSegments(m); !ok {
			t.Fatalf("ParseCQ(%q) = %+v is not valid: %s", s, m, why)
		}
		r := onebot.RenderCQ(m)
		if back := onebot.ParseCQ(r); !onebot.EqualMessages(m, back) {
			t.Fatalf("ParseCQ(RenderCQ(%+v)) = %+v (via %q, from %q)", m, back, r, s)
		}
	})
}

// FuzzToSegments: the conversion of any CQ-code message never panics;
// every media segment carries Media, stickers come only from image and
// mface segments, and only sticker-marked images become stickers.
func FuzzToSegments(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m := onebot.ParseCQ(s)
		segs := onebot.ToSegments(m, "10001000")
		stickers, images := 0, 0
		for _, w := range m {
			switch {
			case w.Type == "mface", w.Type == "image" && (w.Data["sub_type"] == "1" || w.Data["subType"] == "1"):
				stickers++
			case w.Type == "image":
				images++
			}
		}
		gotStickers, gotImages := 0, 0
		for _, seg := range segs {
			if seg.Type.IsMedia() && seg.Media == nil {
				t.Fatalf("media segment without Media: %+v (from %q)", seg, s)
			}
			switch seg.Type {
			case channel.SegSticker:
				gotStickers++
			case channel.SegImage:
				gotImages++
			}
		}
		if gotStickers != stickers || gotImages != images {
			t.Fatalf("%q: %d stickers and %d images, want %d and %d", s, gotStickers, gotImages, stickers, images)
		}
	})
}

// FuzzCQRoundTrip builds a valid segment list from the fuzz input and
// checks that ParseCQ(RenderCQ(m)) == m.
func FuzzCQRoundTrip(f *testing.F) {
	f.Add([]byte{3, 0, 5, 'a', '[', ']', ',', '&', 1, 2, 3, 4, '=', ',', 0xe4, 0xbd, 0xa0})
	f.Add([]byte("\x05\x01\x02\x03hello[CQ:face,id=1]&#44;&amp;"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := genMessage(data)
		if ok, why := onebot.ValidSegments(m); !ok {
			t.Fatalf("generator made an invalid list %+v: %s", m, why)
		}
		r := onebot.RenderCQ(m)
		if back := onebot.ParseCQ(r); !onebot.EqualMessages(m, back) {
			t.Fatalf("ParseCQ(RenderCQ(%+v)) = %+v (via %q)", m, back, r)
		}
	})
}

// genMessage deterministically turns bytes into a valid segment list whose
// texts and values are full of the characters that need escaping.
func genMessage(data []byte) onebot.Message {
	g := &gen{b: data}
	types := []string{"face", "image", "at", "reply", "share", "node", "x.y-z_1", "record", "mface", "video", "file"}
	keys := []string{"id", "file", "qq", "url", "title", "content", "k_1", "type", "sub_type", "summary", "file_id", "file_size"}
	var m onebot.Message
	for n := g.next() % 8; n > 0 && !g.done(); n-- {
		if g.next()%3 == 0 {
			s := g.str()
			if s == "" {
				continue
			}
			if k := len(m); k > 0 && m[k-1].Type == "text" {
				m[k-1].Data["text"] += s
			} else {
				m = append(m, onebot.TextSegment(s))
			}
			continue
		}
		s := onebot.Segment{Type: types[int(g.next())%len(types)], Data: map[string]string{}}
		for k := g.next() % 4; k > 0; k-- {
			s.Data[keys[int(g.next())%len(keys)]] = g.str()
		}
		m = append(m, s)
	}
	return m
}

type gen struct {
	b []byte
	i int
}

func (g *gen) done() bool { return g.i >= len(g.b) }

func (g *gen) next() byte {
	if g.done() {
		return 0
	}
	g.i++
	return g.b[g.i-1]
}

// str reads a short string: bytes below 16 pick a tricky token, others
// are taken as they are (so invalid UTF-8 appears too).
func (g *gen) str() string {
	tokens := []string{"[", "]", ",", "&", "=", "&amp;", "&#91;", "&#93;", "&#44;", "[CQ:", "[CQ:face,id=1]", "你好", "👋🏽", " ", "\n", "&amp;#91;"}
	var out []byte
	for n := g.next() % 12; n > 0 && !g.done(); n-- {
		c := g.next()
		if int(c) < len(tokens) {
			out = append(out, tokens[c]...)
		} else {
			out = append(out, c)
		}
	}
	return string(out)
}
