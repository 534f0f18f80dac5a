package browser

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"

	"github.com/personakit/persona/internal/netguard"
)

// Settle tuning: a page is settled when no request has been in flight and
// the DOM has not changed for settleQuiet, checked every settlePoll.
const (
	settleQuiet = 300 * time.Millisecond
	settlePoll  = 100 * time.Millisecond
	// callTimeout bounds one short CDP call made outside any other bound
	// (closing a context).
	callTimeout = 5 * time.Second
	// docGrace is how long an aborted navigation waits for the response
	// event that tells whether it was a download.
	docGrace = 500 * time.Millisecond
)

// surface is one isolated browsing context: a fresh incognito browser
// context (own cookies, storage and cache) with one page in it, its
// document requests re-checked by the guard and downloads refused.
type surface struct {
	b      *Browser
	inst   *instance
	ctx    context.Context // the surface's lifetime; its listeners stop with it
	cancel context.CancelFunc
	bctx   proto.BrowserBrowserContextID
	page   *rod.Page // bound to ctx; use at(ctx) for calls
	wg     sync.WaitGroup
	once   sync.Once

	mu       sync.Mutex
	refused  error         // the last document request the guard refused
	download string        // the URL of the last main document that is a download
	docSeen  chan struct{} // signalled when a main document response arrives
	inflight map[proto.NetworkRequestID]struct{}
	netQuiet time.Time // when inflight last became empty (zero while busy)
}

// openSurface creates the incognito context and its page on in. setup
// bounds the CDP calls made here; life is the surface's lifetime. On
// error nothing is left open.
func (b *Browser) openSurface(setup, life context.Context, in *instance) (*surface, error) {
	ctx, cancel := context.WithCancel(life)
	stopWithInst := context.AfterFunc(in.ctx, cancel)
	s := &surface{b: b, inst: in, ctx: ctx, cancel: func() { stopWithInst(); cancel() },
		inflight: map[proto.NetworkRequestID]struct{}{}, netQuiet: time.Now(), docSeen: make(chan struct{}, 1)}
	// Every object made here is bound to the surface's lifetime (the
	// driver keeps the page's first context for some calls); the set-up
	// is bounded by ending the surface if setup ends first.
	stopWithSetup := context.AfterFunc(setup, cancel)
	if err := s.setup(); err != nil || !stopWithSetup() {
		s.close()
		if err == nil || setup.Err() != nil {
			err = errors.Join(setup.Err(), err)
		}
		return nil, err
	}
	return s, nil
}

func (s *surface) setup() error {
	in, ctx := s.inst, s.ctx
	proxyURL := "http://" + s.b.proxy.addr()
	res, err := proto.TargetCreateBrowserContext{
		DisposeOnDetach: true,
		ProxyServer:     proxyURL,
		ProxyBypassList: "<-loopback>",
	}.Call(in.rb.Context(ctx))
	if err != nil {
		return fmt.Errorf("browser: new context: %w", err)
	}
	s.bctx = res.BrowserContextID
	inc := in.rb.Context(ctx)
	inc.BrowserContextID = s.bctx

	err = proto.BrowserSetDownloadBehavior{
		Behavior:         proto.BrowserSetDownloadBehaviorBehaviorDeny,
		BrowserContextID: s.bctx,
	}.Call(inc)
	if err != nil {
		return fmt.Errorf("browser: download policy: %w", err)
	}

	page, err := inc.Page(proto.TargetCreateTarget{})
	if err != nil {
		return fmt.Errorf("browser: new page: %w", err)
	}
	s.page = page
	if err := (proto.EmulationSetUserAgentOverride{UserAgent: in.userAgent}).Call(page); err != nil {
		return fmt.Errorf("browser: user agent: %w", err)
	}

	// Document requests (the page, its frames, every redirect hop) are
	// paused and checked before they leave; the proxy checks the rest.
	err = proto.FetchEnable{Patterns: []*proto.FetchRequestPattern{{
		URLPattern:   "*",
		ResourceType: proto.NetworkResourceTypeDocument,
		RequestStage: proto.FetchRequestStageRequest,
	}}}.Call(page)
	if err != nil {
		return fmt.Errorf("browser: request checks: %w", err)
	}
	if err := (proto.NetworkEnable{}).Call(page); err != nil {
		return fmt.Errorf("browser: network events: %w", err)
	}
	mainFrame := proto.PageFrameID(s.page.TargetID)

	// Listeners: subscribed now, served until the surface ends.
	pageEvents := s.page.EachEvent(
		func(e *proto.FetchRequestPaused) { s.checkDocument(e) },
		func(e *proto.NetworkRequestWillBeSent) {
			if tracked(e.Type) {
				s.netAdd(e.RequestID)
			}
		},
		func(e *proto.NetworkResponseReceived) {
			if e.Type == proto.NetworkResourceTypeDocument && e.FrameID == mainFrame && e.Response != nil {
				s.noteDocument(e.Response)
			}
		},
		func(e *proto.NetworkLoadingFinished) { s.netDone(e.RequestID) },
		func(e *proto.NetworkLoadingFailed) { s.netDone(e.RequestID) },
	)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); pageEvents() }()
	return nil
}

// tracked reports whether requests of type t count against "network
// quiet": long-lived streams never finish and would never let a page
// settle.
func tracked(t proto.NetworkResourceType) bool {
	switch t {
	case proto.NetworkResourceTypeWebSocket, proto.NetworkResourceTypeEventSource, proto.NetworkResourceTypeMedia:
		return false
	}
	return true
}

func (s *surface) netAdd(id proto.NetworkRequestID) {
	s.mu.Lock()
	s.inflight[id] = struct{}{}
	s.netQuiet = time.Time{}
	s.mu.Unlock()
}

func (s *surface) netDone(id proto.NetworkRequestID) {
	s.mu.Lock()
	if _, ok := s.inflight[id]; ok {
		delete(s.inflight, id)
		if len(s.inflight) == 0 {
			s.netQuiet = time.Now()
		}
	}
	s.mu.Unlock()
}

// quietSince reports since when no tracked request has been in flight
// (zero while one is).
func (s *surface) quietSince() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.netQuiet
}

// checkDocument lets a paused document request continue when the guard
// accepts its URL, and fails it otherwise. The check may resolve a name,
// so it runs off the event loop.
func (s *surface) checkDocument(e *proto.FetchRequestPaused) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
		defer cancel()
		p := s.page.Context(ctx)
		if _, err := s.b.cfg.Guard.CheckURL(ctx, e.Request.URL); err != nil {
			if errors.Is(err, netguard.ErrBlocked) {
				err = &RefusedError{URL: e.Request.URL, Err: err}
			} else {
				err = fmt.Errorf("browser: %s: %w", e.Request.URL, err)
			}
			s.mu.Lock()
			s.refused = err
			s.mu.Unlock()
			_ = proto.FetchFailRequest{RequestID: e.RequestID, ErrorReason: proto.NetworkErrorReasonBlockedByClient}.Call(p)
			return
		}
		_ = proto.FetchContinueRequest{RequestID: e.RequestID}.Call(p)
	}()
}

// noteDocument remembers whether the main frame's latest document is a
// download (an attachment, or a type a browser does not show). Downloads
// are denied; this turns the aborted navigation into a clear error.
func (s *surface) noteDocument(r *proto.NetworkResponse) {
	dl := ""
	if isDownload(r) {
		dl = r.URL
	}
	s.mu.Lock()
	s.download = dl
	s.mu.Unlock()
	select {
	case s.docSeen <- struct{}{}:
	default:
	}
}

func isDownload(r *proto.NetworkResponse) bool {
	for k, v := range r.Headers {
		if strings.EqualFold(k, "Content-Disposition") &&
			strings.HasPrefix(strings.ToLower(strings.TrimSpace(v.Str())), "attachment") {
			return true
		}
	}
	switch strings.ToLower(r.MIMEType) {
	case "application/octet-stream", "application/zip", "application/x-msdownload",
		"application/x-executable", "application/vnd.debian.binary-package":
		return true
	}
	return false
}

// takeRefusal returns and clears what the guard refused and the download
// the page tried, if any.
func (s *surface) takeRefusal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.refused
	s.refused = nil
	if err == nil && s.download != "" {
		err = fmt.Errorf("%w (%s)", ErrDownload, s.download)
	}
	s.download = ""
	return err
}

// at returns the page bound to ctx for calls.
func (s *surface) at(ctx context.Context) *rod.Page { return s.page.Context(ctx) }

// close disposes of the context (closing its page) and waits for the
// listeners to stop. It is idempotent.
func (s *surface) close() {
	s.once.Do(func() {
		if s.bctx != "" && s.inst.alive() {
			ctx, cancel := context.WithTimeout(s.inst.ctx, callTimeout)
			_ = proto.TargetDisposeBrowserContext{BrowserContextID: s.bctx}.Call(s.inst.rb.Context(ctx))
			cancel()
		}
		s.cancel()
		s.wg.Wait()
	})
}

// navigate loads rawURL and waits until the page settles or ctx ends.
// It returns the settled snapshot, or on timeout the last snapshot that
// showed anything; settled reports which.
func (s *surface) navigate(ctx context.Context, rawURL string) (snap snapshot, settled bool, err error) {
	_ = s.takeRefusal() // forget what an earlier page did
	select {
	case <-s.docSeen:
	default:
	}
	nerr := s.navigateOnce(ctx, rawURL)
	if nerr != nil && strings.Contains(nerr.Error(), "net::ERR_ABORTED") {
		// A download aborts the navigation; its response event may still
		// be on its way to the listener.
		t := time.NewTimer(docGrace)
		select {
		case <-s.docSeen:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	if rerr := s.takeRefusal(); rerr != nil && (nerr != nil || errors.Is(rerr, netguard.ErrBlocked)) {
		return snapshot{}, false, rerr
	}
	if nerr != nil {
		if ctx.Err() == nil {
			return snapshot{}, false, nerr
		}
		// Still waiting for the first response at the settle bound: take
		// whatever the page shows.
	}
	snap, settled = s.settle(ctx)
	if rerr := s.takeRefusal(); rerr != nil && !snap.usable() {
		return snapshot{}, false, rerr
	}
	return snap, settled, nil
}

func (s *surface) navigateOnce(ctx context.Context, rawURL string) error {
	res, err := proto.PageNavigate{URL: rawURL}.Call(s.at(ctx))
	if err != nil {
		return fmt.Errorf("browser: loading %s: %w", rawURL, err)
	}
	if res.ErrorText != "" {
		return fmt.Errorf("browser: loading %s failed: %s", rawURL, res.ErrorText)
	}
	return nil
}

// settle polls the page until it is quiet or ctx ends.
func (s *surface) settle(ctx context.Context) (snapshot, bool) {
	var last snapshot
	var sig string
	var stableSince time.Time
	t := time.NewTicker(settlePoll)
	defer t.Stop()
	for {
		snap, err := s.snapshot(ctx, s.b.cfg.MaxText)
		if err == nil {
			now := time.Now()
			if snap.usable() {
				last = snap
			}
			if sig2 := snap.signature(); sig2 != sig || stableSince.IsZero() {
				sig, stableSince = sig2, now
			}
			quiet := s.quietSince()
			if snap.Ready == "complete" && !quiet.IsZero() &&
				now.Sub(quiet) >= settleQuiet && now.Sub(stableSince) >= settleQuiet {
				return snap, true
			}
		}
		select {
		case <-ctx.Done():
			return last, false
		case <-t.C:
		}
	}
}

// snapshot is what the page shows at one moment.
type snapshot struct {
	URL      string `json:"url"`
	Title    string `json:"title"`
	Ready    string `json:"ready"`
	Text     string `json:"text"`
	Cut      bool   `json:"cut"`
	Elements int    `json:"elements"`
	Length   int    `json:"length"`
}

// usable reports whether the snapshot shows a real page with something on
// it (not a blank or an error page).
func (s snapshot) usable() bool {
	return s.URL != "" && s.URL != "about:blank" && !isErrorPage(s.URL) &&
		(s.Text != "" || s.Title != "")
}

func (s snapshot) signature() string {
	return fmt.Sprintf("%s|%s|%d|%d", s.URL, s.Ready, s.Elements, s.Length)
}

func isErrorPage(u string) bool {
	pu, err := url.Parse(u)
	return err == nil && pu.Scheme == "chrome-error"
}

// snapshotJS reads the page's visible text (innerText, so hidden elements
// and scripts are left out) and its state. %d is the most UTF-16 units to
// return.
const snapshotJS = `(() => {
  const root = document.body || document.documentElement;
  let text = root ? (root.innerText ?? root.textContent ?? "") : "";
  const length = text.length;
  const cut = length > %d;
  if (cut) text = text.slice(0, %d);
  return {url: location.href, title: document.title || "", ready: document.readyState,
    text, cut, length, elements: document.getElementsByTagName("*").length};
})()`

// snapshot evaluates snapshotJS with room for maxRunes runes.
func (s *surface) snapshot(ctx context.Context, maxRunes int) (snapshot, error) {
	units := 2 * (maxRunes + 1) // a rune is at most two UTF-16 units
	res, err := proto.RuntimeEvaluate{
		Expression:    fmt.Sprintf(snapshotJS, units, units),
		ReturnByValue: true,
		Silent:        true,
	}.Call(s.at(ctx))
	if err != nil {
		return snapshot{}, err
	}
	if res.ExceptionDetails != nil {
		return snapshot{}, fmt.Errorf("browser: reading the page: %s", res.ExceptionDetails.Text)
	}
	var snap snapshot
	if err := res.Result.Value.Unmarshal(&snap); err != nil {
		return snapshot{}, fmt.Errorf("browser: reading the page: %w", err)
	}
	return snap, nil
}
