package persona

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
)

// The delivery boundary. Every chunk to a platform goes through one
// outbound.Exit (pipeline.exit), whatever Sender sends it: the delivery
// ledger, mentions as platform mentions, control markers and secret
// masking. The Exit reports what went out to echo (history) and asks
// echoed when it settles a chunk a crash cut off.

// echo writes a chunk the platform acknowledged into history as the bot's
// own message, with the quote and mentions it went out with, so the next
// prompt shows which message each reply answered.
func (p *Pipeline) echo(ctx context.Context, s outbound.Sent) {
	sp, err := channel.ParseSessionKey(s.SessionKey)
	if err != nil {
		return
	}
	id := fmt.Sprintf("%s#%d", s.TurnID, s.Slot)
	if s.Node > 0 || s.Slot == outbound.ForwardSlot {
		id = fmt.Sprintf("%s#card%d", s.TurnID, s.Node)
	}
	if len(s.Receipt.MessageIDs) > 0 && s.Slot != outbound.ForwardSlot {
		id = s.Receipt.MessageIDs[0]
	}
	at := s.Receipt.Time
	if at.IsZero() {
		at = p.clk.Now()
	}
	var segs []channel.Segment
	if s.Out.ReplyTo != "" {
		segs = append(segs, channel.Quote(s.Out.ReplyTo))
	}
	for _, m := range s.Out.Mentions {
		segs = append(segs, channel.Mention(m))
	}
	if s.Out.Text != "" {
		segs = append(segs, channel.Text(s.Out.Text))
	}
	for _, m := range s.Out.Media {
		segs = append(segs, channel.Segment{Type: mediaSegment(m), Media: &m})
	}
	ev := channel.Event{Platform: sp.Platform, Profile: sp.Profile, BotID: sp.BotID, Kind: channel.KindSelf,
		Chat: s.Out.Chat, SessionKey: s.SessionKey, MessageID: id, Time: at,
		Sender: channel.Sender{ID: sp.BotID, IsBot: true}, Segments: segs}
	if ev.Chat.ID == "" {
		ev.Chat = sp.Chat
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultBookkeeping)
	defer cancel()
	if err := p.appendHistory(hctx, ev, memory.Out); err != nil {
		p.log.Warn("history of sent chunk", "turn", s.TurnID, "err", err)
	}
	p.scopes.learn(&ev)
}

// mediaSegment is the segment type of an outgoing attachment.
func mediaSegment(m channel.Media) channel.SegmentType {
	switch {
	case strings.HasPrefix(m.MIME, "video/"):
		return channel.SegVideo
	case strings.HasPrefix(m.MIME, "audio/"):
		return channel.SegVoice
	case strings.HasPrefix(m.MIME, "image/"), m.MIME == "":
		return channel.SegImage
	}
	return channel.SegFile
}

// echoed looks for the bot's own message with text in the session's
// history since a time (what the channel echoed back of the bot's sends),
// for the exit's reconciliation.
func (p *Pipeline) echoed(ctx context.Context, session string, _ channel.Chat, since time.Time, text string) ([]string, bool, error) {
	hist, err := memory.RecentOf(ctx, p.opt.History, session, historyWindow)
	if err != nil {
		return nil, false, err
	}
	for i := len(hist) - 1; i >= 0; i-- {
		e := &hist[i]
		if !since.IsZero() && e.Event.Time.Before(since) {
			break
		}
		if e.Direction == memory.Out && e.Event.Kind == channel.KindSelf && strings.TrimSpace(e.Event.Text()) == text &&
			e.Event.MessageID != "" && !strings.Contains(e.Event.MessageID, "#") {
			return []string{e.Event.MessageID}, true, nil
		}
	}
	return nil, false, nil
}
