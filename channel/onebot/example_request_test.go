package onebot_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
)

// upSink hands events to a channel and closes up once the adapter is
// connected and online.
type upSink struct {
	events chan channel.Event
	up     chan struct{}
}

func (s *upSink) HandleEvent(_ context.Context, ev channel.Event) error {
	s.events <- ev
	return nil
}

func (s *upSink) ReportState(_ context.Context, st channel.State) {
	if st.Connected && st.Online {
		select {
		case <-s.up:
		default:
			close(s.up)
		}
	}
}

// A friend request arrives as a channel.NoticeFriendRequest notice; the
// answer quotes it.
func ExampleChannel_AnswerFriendRequest() {
	fake := onebottest.New(onebottest.Config{})
	defer fake.Close()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeForwardWS, URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/"})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sink := &upSink{events: make(chan channel.Event, 1), up: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- ch.Run(ctx, sink) }()
	select {
	case <-sink.up:
	case <-ctx.Done():
		panic("the adapter did not come up")
	}

	if _, err := fake.EmitFriendRequest(ctx, onebottest.FriendRequest{UserID: 4242, Comment: "hi, it's alice", Flag: "req-1"}); err != nil {
		panic(err)
	}
	ev := <-sink.events
	fmt.Println(ev.Chat, ev.Notice.Type, ev.Notice.Flag, ev.Notice.Comment)
	if err := ch.AnswerFriendRequest(ctx, *ev.Notice, true); err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", fake.FriendAnswers())
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// private:4242 friend_request req-1 hi, it's alice
	// [{Flag:req-1 UserID:4242 Approve:true Remark:}]
}
