package onebot_test

import (
	"fmt"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
)

func ExampleParseCQ() {
	m := onebot.ParseCQ("[CQ:reply,id=-42][CQ:at,qq=10001000] 看 &#91;图&#93;[CQ:image,file=a.jpg,url=https://x.example/a?b=1&amp;c=2]")
	for _, s := range m {
		fmt.Println(s.Type, s.Data)
	}
	fmt.Println(onebot.RenderCQ(m))
	// Output:
	// reply map[id:-42]
	// at map[qq:10001000]
	// text map[text: 看 [图]]
	// image map[file:a.jpg url:https://x.example/a?b=1&c=2]
	// [CQ:reply,id=-42][CQ:at,qq=10001000] 看 &#91;图&#93;[CQ:image,file=a.jpg,url=https://x.example/a?b=1&amp;c=2]
}

func ExampleSign() {
	body := []byte(`{"post_type":"meta_event","meta_event_type":"heartbeat","self_id":10001000,"time":1515204254}`)
	sig := onebot.Sign("some-secret", body)
	fmt.Println(sig)
	fmt.Println(onebot.VerifySignature("some-secret", body, sig))
	// Output:
	// sha1=193efaa25613ed55a86bf42430e36019d8251be1
	// true
}

func ExampleOutgoingMessage() {
	m, err := onebot.OutgoingMessage(channel.Outgoing{
		Chat:     channel.Chat{Kind: channel.Group, ID: "100200300"},
		Text:     "在的",
		ReplyTo:  "-1234",
		Mentions: []string{"4242"},
		Media:    []channel.Media{{URL: "https://x.example/cat.png", MIME: "image/png"}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(onebot.RenderCQ(m))
	// Output:
	// [CQ:reply,id=-1234][CQ:at,qq=4242] 在的[CQ:image,file=https://x.example/cat.png]
}
