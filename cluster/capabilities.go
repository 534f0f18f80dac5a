package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/personakit/persona/channel"
)

// DefaultMaxMedia is the most content a relayed media fetch carries when
// the caller's channel.MediaRequest sets no MaxBytes.
const DefaultMaxMedia = 32 << 20

var (
	_ channel.Forwarder        = (*shared)(nil)
	_ channel.HistoryFetcher   = (*shared)(nil)
	_ channel.ChatLister       = (*shared)(nil)
	_ channel.MemberLookup     = (*shared)(nil)
	_ channel.MediaFetcher     = (*shared)(nil)
	_ channel.Typer            = (*shared)(nil)
	_ channel.Recaller         = (*shared)(nil)
	_ channel.RequestResponder = (*shared)(nil)
	_ channel.ForwardSender    = (*shared)(nil)
)

// callSpec is how a follower reports a kind of call.
type callSpec struct {
	// what names the call in errors.
	what string
	// effect: the call acts on the platform, so one the holder stopped in
	// may have happened (channel.ErrUnconfirmed); a call without effect
	// (a read) that the holder stopped in just failed (channel.ErrOffline).
	effect bool
}

var callSpecs = map[RequestKind]callSpec{
	KindHistory:       {what: "history read"},
	KindChats:         {what: "chat list"},
	KindMember:        {what: "member lookup"},
	KindMedia:         {what: "media fetch"},
	KindTyping:        {what: "typing indicator"},
	KindRecall:        {what: "recall", effect: true},
	KindAnswerRequest: {what: "friend request answer", effect: true},
	KindForward:       {what: "forward card", effect: true},
}

// The payloads and answers of the calls, as JSON.
type (
	memberArgs struct {
		Chat   channel.Chat `json:"chat"`
		UserID string       `json:"user_id"`
	}
	mediaArgs struct {
		Chat    channel.Chat         `json:"chat"`
		Media   channel.Media        `json:"media"`
		Request channel.MediaRequest `json:"request"`
	}
	mediaAnswer struct {
		URL  string `json:"url,omitempty"`
		MIME string `json:"mime,omitempty"`
		Size int64  `json:"size,omitempty"`
		// HasBody: the content is Result.Body (else it is at URL).
		HasBody bool `json:"has_body,omitempty"`
	}
	recallArgs struct {
		Chat      channel.Chat `json:"chat"`
		MessageID string       `json:"message_id"`
	}
	answerArgs struct {
		Notice channel.Notice `json:"notice"`
		Accept bool           `json:"accept"`
	}
	forwardArgs struct {
		Chat  channel.Chat          `json:"chat"`
		Nodes []channel.ForwardNode `json:"nodes"`
	}
)

// ForwardsCapabilities marks the channel Share returns as a
// channel.Forwarder: channel.As finds a capability of it only when the
// wrapped channel has it.
func (s *shared) ForwardsCapabilities() {}

// capability returns the wrapped channel's T, or an error naming what
// it cannot do.
func capability[T any](s *shared, what string) (T, error) {
	c, ok := channel.As[T](s.ch)
	if !ok {
		return c, fmt.Errorf("cluster: %s: the channel cannot %s: %w", s.opt.Name, what, errors.ErrUnsupported)
	}
	return c, nil
}

// FetchHistory reads through the wrapped channel when this process holds
// the connection, else through the holder. A read the holder did not
// finish (it stopped, or did not take it in time) fails with
// channel.ErrOffline and may be asked again.
func (s *shared) FetchHistory(ctx context.Context, q channel.HistoryQuery) (channel.HistoryPage, error) {
	hf, err := capability[channel.HistoryFetcher](s, "read history")
	if err != nil {
		return channel.HistoryPage{}, err
	}
	if s.holding.Load() {
		return hf.FetchHistory(ctx, q)
	}
	var page channel.HistoryPage
	if _, err := s.call(ctx, KindHistory, q, &page); err != nil {
		return channel.HistoryPage{}, err
	}
	for i := range page.Events {
		page.Events[i].Time = page.Events[i].Time.UTC()
	}
	return page, nil
}

// ListChats lists the chats through the wrapped channel, or the holder.
func (s *shared) ListChats(ctx context.Context) ([]channel.Chat, error) {
	cl, err := capability[channel.ChatLister](s, "list chats")
	if err != nil {
		return nil, err
	}
	if s.holding.Load() {
		return cl.ListChats(ctx)
	}
	var chats []channel.Chat
	if _, err := s.call(ctx, KindChats, nil, &chats); err != nil {
		return nil, err
	}
	return chats, nil
}

// LookupMember looks a group member up through the wrapped channel, or
// the holder.
func (s *shared) LookupMember(ctx context.Context, chat channel.Chat, userID string) (channel.Member, error) {
	ml, err := capability[channel.MemberLookup](s, "look members up")
	if err != nil {
		return channel.Member{}, err
	}
	if s.holding.Load() {
		return ml.LookupMember(ctx, chat, userID)
	}
	var m channel.Member
	if _, err := s.call(ctx, KindMember, memberArgs{Chat: chat, UserID: userID}, &m); err != nil {
		return channel.Member{}, err
	}
	return m, nil
}

// FetchMedia gets a media reference's content through the wrapped
// channel, or the holder. The holder reads a body fully, at most
// req.MaxBytes (DefaultMaxMedia when 0; more fails with
// channel.ErrMediaTooLarge), and the content returned here reads those
// bytes; content at a URL comes back as that URL.
func (s *shared) FetchMedia(ctx context.Context, chat channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	mf, err := capability[channel.MediaFetcher](s, "fetch media")
	if err != nil {
		return channel.MediaContent{}, err
	}
	if s.holding.Load() {
		return mf.FetchMedia(ctx, chat, m, req)
	}
	var ans mediaAnswer
	res, err := s.call(ctx, KindMedia, mediaArgs{Chat: chat, Media: m, Request: req}, &ans)
	if err != nil {
		return channel.MediaContent{}, err
	}
	mc := channel.MediaContent{URL: ans.URL, MIME: ans.MIME, Size: ans.Size}
	if ans.HasBody {
		mc.Body = io.NopCloser(bytes.NewReader(res.Body))
	}
	return mc, nil
}

// Typing shows the typing indicator through the wrapped channel, or the
// holder.
func (s *shared) Typing(ctx context.Context, chat channel.Chat) error {
	ty, err := capability[channel.Typer](s, "show typing")
	if err != nil {
		return err
	}
	if s.holding.Load() {
		return ty.Typing(ctx, chat)
	}
	_, err = s.call(ctx, KindTyping, chat, nil)
	return err
}

// Recall deletes a sent message through the wrapped channel, or the
// holder. A recall the holder stopped in fails with
// channel.ErrUnconfirmed (it may have happened).
func (s *shared) Recall(ctx context.Context, chat channel.Chat, messageID string) error {
	rc, err := capability[channel.Recaller](s, "recall messages")
	if err != nil {
		return err
	}
	if s.holding.Load() {
		return rc.Recall(ctx, chat, messageID)
	}
	_, err = s.call(ctx, KindRecall, recallArgs{Chat: chat, MessageID: messageID}, nil)
	return err
}

// AnswerFriendRequest answers a friend request through the wrapped
// channel, or the holder. An answer the holder stopped in fails with
// channel.ErrUnconfirmed (it may have been given).
func (s *shared) AnswerFriendRequest(ctx context.Context, n channel.Notice, accept bool) error {
	rr, err := capability[channel.RequestResponder](s, "answer friend requests")
	if err != nil {
		return err
	}
	if s.holding.Load() {
		return rr.AnswerFriendRequest(ctx, n, accept)
	}
	_, err = s.call(ctx, KindAnswerRequest, answerArgs{Notice: n, Accept: accept}, nil)
	return err
}

// SendForward sends a merged-forward card through the wrapped channel,
// or the holder. A card has no idempotency key: one the holder stopped
// in fails with channel.ErrUnconfirmed, so that the delivery ledger
// keeps its intent rather than send it twice.
func (s *shared) SendForward(ctx context.Context, chat channel.Chat, nodes []channel.ForwardNode) (channel.Receipt, error) {
	fs, err := capability[channel.ForwardSender](s, "send forward cards")
	if err != nil {
		return channel.Receipt{}, err
	}
	if s.holding.Load() {
		return fs.SendForward(ctx, chat, nodes)
	}
	var rc channel.Receipt
	if _, err := s.call(ctx, KindForward, forwardArgs{Chat: chat, Nodes: nodes}, &rc); err != nil {
		return channel.Receipt{}, err
	}
	rc.Time = rc.Time.UTC()
	return rc, nil
}

// call relays a call of kind with args (encoded as JSON) to the holder
// and decodes its answer into answer (unless nil). It returns the done
// request, or an error: the holder's error as a *RemoteError, or one
// wrapping channel.ErrOffline (no online holder, not taken in time, or,
// for a call without effect, the holder stopped in it) or
// channel.ErrUnconfirmed (a call with effect the holder stopped in).
func (s *shared) call(ctx context.Context, kind RequestKind, args, answer any) (Result, error) {
	spec, ok := callSpecs[kind]
	if !ok {
		return Result{}, fmt.Errorf("cluster: %s: unknown kind of call %q", s.opt.Name, kind)
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return Result{}, fmt.Errorf("cluster: %s: encode the %s: %w", s.opt.Name, spec.what, err)
	}
	stopped := channel.ErrOffline
	if spec.effect {
		stopped = channel.ErrUnconfirmed
	}
	res, err := s.request(ctx, spec.what, func(ctx context.Context, opt RequestOptions) (Result, error) {
		return s.st.Call(ctx, s.opt.Name, kind, payload, opt)
	})
	switch {
	case errors.Is(err, ErrUnknownRequest):
		return Result{}, fmt.Errorf("cluster: %s: the relayed %s disappeared: %w", s.opt.Name, spec.what, stopped)
	case err != nil:
		return Result{}, err
	}
	switch res.Status {
	case StatusDone:
		if answer != nil {
			if err := json.Unmarshal(res.Answer, answer); err != nil {
				return Result{}, fmt.Errorf("cluster: %s: decode the answer of the relayed %s: %w", s.opt.Name, spec.what, err)
			}
		}
		return res, nil
	case StatusFailed:
		if err := res.Error.Err(); err != nil {
			return Result{}, err
		}
		return Result{}, fmt.Errorf("cluster: %s: the relayed %s failed", s.opt.Name, spec.what)
	case StatusUnconfirmed:
		return Result{}, fmt.Errorf("cluster: %s: the holding process stopped while making the %s: %w", s.opt.Name, spec.what, stopped)
	case StatusCancelled:
		return Result{}, fmt.Errorf("cluster: %s: the relayed %s was withdrawn before it was made: %w",
			s.opt.Name, spec.what, channel.ErrOffline)
	}
	return Result{}, fmt.Errorf("cluster: %s: relayed %s %d is %s", s.opt.Name, spec.what, res.ID, res.Status)
}

// serveCall makes a relayed call through the wrapped channel, in the
// holder, and returns its answer (JSON) and, for media, the content.
func (s *shared) serveCall(ctx context.Context, r Request) (answer, body []byte, err error) {
	switch r.Kind {
	case KindHistory:
		answer, err = serve(r.Payload, func(q channel.HistoryQuery) (channel.HistoryPage, error) {
			hf, err := capability[channel.HistoryFetcher](s, "read history")
			if err != nil {
				return channel.HistoryPage{}, err
			}
			return hf.FetchHistory(ctx, q)
		})
	case KindChats:
		answer, err = serve(r.Payload, func(struct{}) ([]channel.Chat, error) {
			cl, err := capability[channel.ChatLister](s, "list chats")
			if err != nil {
				return nil, err
			}
			return cl.ListChats(ctx)
		})
	case KindMember:
		answer, err = serve(r.Payload, func(a memberArgs) (channel.Member, error) {
			ml, err := capability[channel.MemberLookup](s, "look members up")
			if err != nil {
				return channel.Member{}, err
			}
			return ml.LookupMember(ctx, a.Chat, a.UserID)
		})
	case KindMedia:
		answer, err = serve(r.Payload, func(a mediaArgs) (mediaAnswer, error) {
			ans, content, err := s.serveMedia(ctx, a)
			body = content
			return ans, err
		})
	case KindTyping:
		answer, err = serve(r.Payload, func(chat channel.Chat) (struct{}, error) {
			ty, err := capability[channel.Typer](s, "show typing")
			if err != nil {
				return struct{}{}, err
			}
			return struct{}{}, ty.Typing(ctx, chat)
		})
	case KindRecall:
		answer, err = serve(r.Payload, func(a recallArgs) (struct{}, error) {
			rc, err := capability[channel.Recaller](s, "recall messages")
			if err != nil {
				return struct{}{}, err
			}
			return struct{}{}, rc.Recall(ctx, a.Chat, a.MessageID)
		})
	case KindAnswerRequest:
		answer, err = serve(r.Payload, func(a answerArgs) (struct{}, error) {
			rr, err := capability[channel.RequestResponder](s, "answer friend requests")
			if err != nil {
				return struct{}{}, err
			}
			return struct{}{}, rr.AnswerFriendRequest(ctx, a.Notice, a.Accept)
		})
	case KindForward:
		answer, err = serve(r.Payload, func(a forwardArgs) (channel.Receipt, error) {
			fs, err := capability[channel.ForwardSender](s, "send forward cards")
			if err != nil {
				return channel.Receipt{}, err
			}
			return fs.SendForward(ctx, a.Chat, a.Nodes)
		})
	default:
		err = fmt.Errorf("cluster: %s: unknown kind of relayed request %q", s.opt.Name, r.Kind)
	}
	if err != nil {
		return nil, nil, err
	}
	return answer, body, nil
}

// serve decodes a call's arguments, makes it with fn and encodes its
// answer.
func serve[A, R any](payload []byte, fn func(A) (R, error)) ([]byte, error) {
	var args A
	if len(payload) > 0 && string(payload) != "null" {
		if err := json.Unmarshal(payload, &args); err != nil {
			return nil, fmt.Errorf("cluster: decode a relayed call: %w", err)
		}
	}
	ans, err := fn(args)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(ans)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode a relayed call's answer: %w", err)
	}
	return b, nil
}

// serveMedia fetches a relayed media reference and reads its body, at
// most the caller's MaxBytes (DefaultMaxMedia when 0).
func (s *shared) serveMedia(ctx context.Context, a mediaArgs) (mediaAnswer, []byte, error) {
	mf, err := capability[channel.MediaFetcher](s, "fetch media")
	if err != nil {
		return mediaAnswer{}, nil, err
	}
	mc, err := mf.FetchMedia(ctx, a.Chat, a.Media, a.Request)
	if err != nil {
		return mediaAnswer{}, nil, err
	}
	ans := mediaAnswer{URL: mc.URL, MIME: mc.MIME, Size: mc.Size}
	if mc.Body == nil {
		return ans, nil, nil
	}
	defer func() { _ = mc.Body.Close() }()
	limit := a.Request.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxMedia
	}
	tooLarge := func(size string) error {
		return fmt.Errorf("cluster: %s: the media is %s, more than the %d bytes that may be relayed: %w",
			s.opt.Name, size, limit, channel.ErrMediaTooLarge)
	}
	if mc.Size > limit {
		return mediaAnswer{}, nil, tooLarge(fmt.Sprintf("%d bytes", mc.Size))
	}
	body, err := io.ReadAll(io.LimitReader(mc.Body, limit+1))
	switch {
	case err != nil:
		return mediaAnswer{}, nil, fmt.Errorf("cluster: %s: read the media: %w", s.opt.Name, err)
	case int64(len(body)) > limit:
		return mediaAnswer{}, nil, tooLarge("longer")
	}
	if body == nil {
		body = []byte{}
	}
	ans.HasBody = true
	if ans.Size == 0 {
		ans.Size = int64(len(body))
	}
	return ans, body, nil
}
