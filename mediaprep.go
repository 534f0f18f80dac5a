package persona

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/media"
	"github.com/personakit/persona/memory"
)

// MediaOptions configures how the pipeline handles pictures, stickers and
// voice (Options.Media). The zero value is the documented defaults: media
// on whenever there is a place for its cache.
type MediaOptions struct {
	// Off turns media handling off: every medium is shown to models as a
	// placeholder ("[image]", "[voice 4s, not transcribed]").
	Off bool
	// Dir holds the media cache (default: <DataDir>/media; with neither
	// Dir nor DataDir, media handling is off).
	Dir string
	// MaxFileBytes, MaxCacheBytes and TTL bound the cache: one file (20
	// MiB), all files (1 GiB; least recently used go first) and how long an
	// unused file is kept (30 days).
	MaxFileBytes  int64
	MaxCacheBytes int64
	TTL           time.Duration
	// Timeout bounds one download (default 30 s).
	Timeout time.Duration
	// Transcriber turns voice into text (agent/openai has one for
	// OpenAI-compatible servers). Nil: voice clips stay untranscribed.
	Transcriber agent.Transcriber
	// DescribeOnly keeps image bytes out of the chat model's requests even
	// when Model accepts images (agent.ImageInput): the vision model
	// describes each picture once and the chat model reads the
	// descriptions.
	DescribeOnly bool
	// MaxImages bounds the pictures attached to one request: the current
	// message's (default 4) and, on top, the quoted message's (2).
	MaxImages int
	// Allow lets media addresses in these private ranges through the
	// public-address guard (a media host on the operator's network; tests).
	// Empty in production: loopback, private, link-local and metadata
	// addresses are refused, after redirects too.
	Allow []netip.Prefix
}

// Defaults of media handling.
const (
	DefaultMaxImages     = 4
	maxDependencyImages  = 2
	describeWait         = 30 * time.Second
	transcribeConcurrent = 2
)

// mediaSetup builds the media service from the options (nil: media off).
func (p *Pipeline) mediaSetup() error {
	mo := &p.opt.Media
	if mo.MaxImages == 0 {
		mo.MaxImages = DefaultMaxImages
	}
	if mo.MaxImages < 0 {
		return fmt.Errorf("persona: Options.Media.MaxImages must not be negative, got %d", mo.MaxImages)
	}
	dir := mo.Dir
	if dir == "" && p.opt.DataDir != "" {
		dir = filepath.Join(p.opt.DataDir, "media")
	}
	if mo.Off || dir == "" {
		return nil
	}
	cache, err := media.OpenCache(media.CacheConfig{Dir: dir, MaxFileBytes: mo.MaxFileBytes, MaxTotalBytes: mo.MaxCacheBytes,
		TTL: mo.TTL, Clock: p.clk, Logger: p.log})
	if err != nil {
		return fmt.Errorf("persona: media cache: %w", err)
	}
	cfg := media.Config{Cache: cache, Allow: mo.Allow, Timeout: mo.Timeout, Transcriber: mo.Transcriber,
		Clock: p.clk, Logger: p.log}
	if p.opt.Model != nil && agent.AcceptsImages(p.opt.Model) {
		// Descriptions are written by the vision group, through the
		// boundary like every model call.
		cfg.Vision = p.model
		p.vision, p.attach = true, !mo.DescribeOnly
	}
	svc, err := media.New(cfg)
	if err != nil {
		return fmt.Errorf("persona: media: %w", err)
	}
	p.media = svc
	return nil
}

// hasMedia reports whether ev has media the pipeline can work on.
func hasMedia(ev *channel.Event) bool {
	for _, s := range ev.Segments {
		if (s.Type.IsVisual() || s.Type == channel.SegVoice) && s.Media != nil {
			return true
		}
	}
	if ev.Quoted != nil {
		for _, s := range ev.Quoted.Segments {
			if s.Type.IsVisual() && s.Media != nil {
				return true
			}
		}
	}
	return false
}

// transcribe fills in the transcripts of the voice clips of l.Event (its
// own and those media-turn assembly took in) before the gates, and stores
// them with their messages. A failure that may pass retries the turn; one
// that will not leaves the clip untranscribed and says why in note.
func (p *Pipeline) transcribe(ctx context.Context, l *inbound.Lease, owners []mediaOwner) (act action, retry bool, note string) {
	if p.media == nil || p.opt.Media.Transcriber == nil {
		return action{}, false, ""
	}
	ev := &l.Event
	var idx []int
	for i, s := range ev.Segments {
		if s.Type == channel.SegVoice && s.Media != nil && s.Media.Transcript == "" {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return action{}, false, ""
	}
	st := p.channelFor(ev.Platform, ev.BotID)
	var ch channel.Channel
	if st != nil {
		ch = st.ch
	}
	texts := make([]string, len(idx))
	errs := make([]error, len(idx))
	var g errgroup.Group
	g.SetLimit(transcribeConcurrent)
	for k, i := range idx {
		seg := ev.Segments[i]
		g.Go(func() error {
			b, err := p.media.Fetch(ctx, ch, ev.Chat, seg)
			if err == nil {
				texts[k], err = p.media.Transcribe(ctx, b)
			}
			errs[k] = err
			return nil
		})
	}
	_ = g.Wait()
	var failed []string
	changed := false
	for k, i := range idx {
		if err := errs[k]; err != nil {
			if ctx.Err() != nil {
				return action{kind: actRelease}, true, ""
			}
			if !media.Definitive(err) && l.Attempts < p.opt.MaxAttempts {
				return action{kind: actRetry, err: fmt.Errorf("transcribe voice: %w", err)}, true, ""
			}
			p.log.Info("voice not transcribed", "id", l.ID, "err", err)
			failed = append(failed, err.Error())
			continue
		}
		m := *ev.Segments[i].Media
		m.Transcript = texts[k]
		if strings.TrimSpace(m.Transcript) == "" {
			m.Transcript = " " // heard no speech: a transcript all the same
		}
		ev.Segments[i].Media = &m
		changed = true
	}
	if changed {
		p.persistMedia(ctx, l, ev, owners)
	}
	if len(failed) > 0 {
		note = "voice not transcribed: " + strings.Join(failed, "; ")
	}
	return action{}, false, note
}

// mediaOwner says which stored message the segments [from, to) of the
// turn's event came from (media-turn assembly appends other messages'
// media).
type mediaOwner struct {
	from, to int
	id       string
	event    channel.Event
}

// persistMedia stores what the turn learnt about its media (transcripts,
// descriptions, content hashes) with the messages they belong to, so
// history shows them as text and a retry does not ask again.
func (p *Pipeline) persistMedia(ctx context.Context, l *inbound.Lease, ev *channel.Event, owners []mediaOwner) {
	own := ev.Clone()
	end := len(ev.Segments)
	if len(owners) > 0 {
		end = owners[0].from
	}
	own.Segments = own.Segments[:end]
	entries := []memory.Entry{{Key: l.ID, SessionKey: l.SessionKey, Direction: memory.In, Event: own}}
	for _, o := range owners {
		e := o.event.Clone()
		e.Segments = mergeMedia(e.Segments, ev.Segments[o.from:o.to])
		entries = append(entries, memory.Entry{Key: o.id, SessionKey: l.SessionKey, Direction: memory.In, Event: e})
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultBookkeeping)
	defer cancel()
	for _, e := range entries {
		if err := p.opt.History.Append(bctx, e); err != nil {
			p.log.Warn("store media details with the message", "id", e.Key, "err", err)
		}
	}
}

// mergeMedia copies the media of got's media segments (the same, in
// order, as the media segments of segs) into segs.
func mergeMedia(segs, got []channel.Segment) []channel.Segment {
	got = mediaSegments(got)
	k := 0
	for i := range segs {
		if !segs[i].Type.IsMedia() || k >= len(got) {
			continue
		}
		if got[k].Media != nil {
			m := *got[k].Media
			segs[i].Media = &m
		}
		k++
	}
	return segs
}

// imagePrep is the pictures of one turn: the current message's (its own
// and what assembly took in) and the quoted message's, fetched and, when
// a vision model is there, described.
type imagePrep struct {
	cur, dep []imageRef
	// parts are the image parts for the chat request (only when the chat
	// model takes images).
	parts, depParts []agent.Part
	// described is closed once every description is in (or given up).
	described chan struct{}
	// fromDescriptions: the model said it could not see the images; the
	// next generation reads descriptions instead.
	fromDescriptions bool
}

// imageRef is one picture: where it is in the event, its content and its
// description.
type imageRef struct {
	quoted  bool
	index   int
	sticker bool
	blob    media.Blob
	ok      bool
	desc    string
}

// prepareImages fetches the turn's pictures and starts describing them in
// the background; once described, what they show is stored with their
// messages (the turn does not wait for that). It changes no segment: wait
// applies the descriptions to the turn's event.
func (p *Pipeline) prepareImages(ctx context.Context, l *inbound.Lease, owners []mediaOwner) *imagePrep {
	ev := &l.Event
	if p.media == nil {
		return nil
	}
	ip := &imagePrep{described: make(chan struct{})}
	for i, s := range ev.Segments {
		if s.Type.IsVisual() && s.Media != nil && len(ip.cur) < p.opt.Media.MaxImages {
			ip.cur = append(ip.cur, imageRef{index: i, sticker: s.Type == channel.SegSticker})
		}
	}
	if ev.Quoted != nil {
		for i, s := range ev.Quoted.Segments {
			if s.Type.IsVisual() && s.Media != nil && len(ip.dep) < maxDependencyImages {
				ip.dep = append(ip.dep, imageRef{quoted: true, index: i, sticker: s.Type == channel.SegSticker})
			}
		}
	}
	if len(ip.cur)+len(ip.dep) == 0 {
		return nil
	}
	var ch channel.Channel
	if st := p.channelFor(ev.Platform, ev.BotID); st != nil {
		ch = st.ch
	}
	refs := ip.all()
	var g errgroup.Group
	for _, r := range refs {
		seg := ip.segment(ev, r)
		g.Go(func() error {
			b, err := p.media.Fetch(ctx, ch, ev.Chat, seg)
			if err != nil {
				p.log.Info("image not fetched", "session", ev.SessionKey, "message", ev.MessageID, "err", err)
				return nil
			}
			if !strings.HasPrefix(b.MIME, "image/") {
				return nil // an animated sticker or a video: not for vision
			}
			r.blob, r.ok = b, true
			if seg.Media.Description != "" {
				r.desc = seg.Media.Description
			}
			return nil
		})
	}
	_ = g.Wait()
	for _, r := range refs {
		if !r.ok || !p.attach || r.sticker {
			continue
		}
		u, err := p.media.DataURL(r.blob)
		if err != nil {
			p.log.Info("image not attached", "err", err)
			continue
		}
		part := agent.Part{ImageURL: u, Detail: "auto"}
		if r.quoted {
			ip.depParts = append(ip.depParts, part)
		} else {
			ip.parts = append(ip.parts, part)
		}
	}
	base := ev.Clone()
	lease := *l
	bctx := p.bgCtx
	if bctx == nil {
		bctx = context.Background()
	}
	bctx = agent.WithScope(bctx, agent.ScopeFrom(ctx))
	p.bg.Go(func() {
		p.describe(bctx, ip, refs)
		// What the pictures show (and their content hashes) goes with
		// their messages, for the history of later turns.
		if ip.apply(&base) {
			wctx, cancel := context.WithTimeout(bctx, DefaultBookkeeping)
			defer cancel()
			p.persistMedia(wctx, &lease, &base, owners)
		}
	})
	return ip
}

// all returns pointers to every image of the turn.
func (ip *imagePrep) all() []*imageRef {
	out := make([]*imageRef, 0, len(ip.cur)+len(ip.dep))
	for i := range ip.cur {
		out = append(out, &ip.cur[i])
	}
	for i := range ip.dep {
		out = append(out, &ip.dep[i])
	}
	return out
}

func (ip *imagePrep) segment(ev *channel.Event, r *imageRef) channel.Segment {
	if r.quoted {
		return ev.Quoted.Segments[r.index]
	}
	return ev.Segments[r.index]
}

// describe writes the descriptions of the fetched images that have none
// (the cache answers for pictures seen before) and closes described.
func (p *Pipeline) describe(ctx context.Context, ip *imagePrep, refs []*imageRef) {
	defer close(ip.described)
	if !p.vision {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, describeWait)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(4)
	for _, r := range refs {
		if !r.ok || r.desc != "" {
			continue
		}
		g.Go(func() error {
			d, err := p.media.Describe(ctx, r.blob, r.sticker)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					p.log.Info("image not described", "sha256", r.blob.SHA256, "err", err)
				}
				return nil
			}
			r.desc = d
			return nil
		})
	}
	_ = g.Wait()
}

// wait waits for the descriptions (bounded by ctx) and applies them to ev
// (see apply). It reports whether ev changed.
func (ip *imagePrep) wait(ctx context.Context, ev *channel.Event) bool {
	if ip == nil {
		return false
	}
	select {
	case <-ip.described:
	case <-ctx.Done():
		return false
	}
	return ip.apply(ev)
}

// apply writes the descriptions and content hashes into ev, once they are
// all in. It changes copies: ev's segments (and quoted message) may be
// shared with other readers (a burst's running turn), so they are cloned
// before the first change. It reports whether ev changed.
func (ip *imagePrep) apply(ev *channel.Event) bool {
	select {
	case <-ip.described:
	default:
		return false
	}
	changed, cloned, qcloned := false, false, false
	for _, r := range ip.all() {
		if !r.ok {
			continue
		}
		seg := ip.segment(ev, r)
		if seg.Media == nil {
			continue
		}
		m := *seg.Media
		if m.SHA256 == r.blob.SHA256 && (r.desc == "" || m.Description == r.desc) {
			continue
		}
		m.SHA256, m.MIME = r.blob.SHA256, r.blob.MIME
		if r.desc != "" {
			m.Description = r.desc
		}
		if r.quoted {
			if !qcloned {
				q := *ev.Quoted
				q.Segments = slices.Clone(q.Segments)
				ev.Quoted, qcloned = &q, true
			}
			ev.Quoted.Segments[r.index].Media = &m
		} else {
			if !cloned {
				ev.Segments, cloned = slices.Clone(ev.Segments), true
			}
			ev.Segments[r.index].Media = &m
		}
		changed = true
	}
	return changed
}

// needsText reports whether a picture of the current message was not
// attached but can be described (a sticker): the prompt then waits for
// its description.
func (ip *imagePrep) needsText(attach bool) bool {
	if ip == nil {
		return false
	}
	for i := range ip.cur {
		// Field by field: the describing goroutine writes desc meanwhile.
		if r := &ip.cur[i]; r.ok && (r.sticker || !attach) {
			return true
		}
	}
	return false
}

// dependencyLines are the quoted pictures as text lines, for a request
// without their bytes.
func (ip *imagePrep) dependencyLines() []string {
	if ip == nil {
		return nil
	}
	select {
	case <-ip.described:
	default:
		return nil // still being described: not waited for
	}
	var out []string
	for _, r := range ip.dep {
		if r.desc == "" {
			continue
		}
		kind := "picture"
		if r.sticker {
			kind = "sticker"
		}
		out = append(out, "The quoted message's "+kind+": "+r.desc)
	}
	return out
}

// attached reports whether the chat request carries pictures.
func (ip *imagePrep) attached() bool {
	return ip != nil && len(ip.parts)+len(ip.depParts) > 0
}
