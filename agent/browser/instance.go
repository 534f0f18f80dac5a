package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/cdp"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/launcher/flags"
	"github.com/go-rod/rod/lib/proto"
)

// instance is one running Chromium process and the driver connected to
// it. Its counters are guarded by Browser.mu.
type instance struct {
	rb        *rod.Browser
	pid       int
	dir       string             // temporary profile, removed by stop
	ctx       context.Context    // ends when the process or the connection is gone
	cancel    context.CancelFunc // ends ctx
	exited    chan struct{}      // closed when the process has exited
	userAgent string             // the browser's own, without "Headless"

	uses    int  // pages opened on it
	open    int  // pages open now
	retired bool // no new pages; stopped when open reaches 0

	stopOnce sync.Once
}

// alive reports whether the process and the connection are up.
func (in *instance) alive() bool { return in.ctx.Err() == nil }

// launch starts a Chromium process and connects to it; b.mu is held.
func (b *Browser) launch() (*instance, error) {
	dir, err := os.MkdirTemp("", "persona-chromium-")
	if err != nil {
		return nil, fmt.Errorf("browser: profile folder: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("browser: profile folder: %w", err)
	}
	lctx, lcancel := context.WithTimeout(context.Background(), launchTimeout)
	defer lcancel()
	l := b.launcher(dir).Context(lctx)
	u, err := l.Launch()
	if err != nil {
		if pid := l.PID(); pid > 0 {
			killTree(pid)
		}
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("browser: starting %s: %w", b.bin, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{pid: l.PID(), dir: dir, ctx: ctx, cancel: cancel, exited: make(chan struct{})}
	go func() {
		// Cleanup returns once the process has exited (it also removes
		// the profile folder).
		l.Cleanup()
		close(in.exited)
		cancel()
	}()
	fail := func(err error) (*instance, error) {
		cancel()
		killTree(in.pid)
		<-in.exited
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("browser: connecting to chromium: %w", err)
	}
	c, err := cdp.StartWithURL(lctx, u, nil)
	if err != nil {
		return fail(err)
	}
	wc := newWatchedClient(c, cancel)
	// No device emulation per page (it costs a relayout each time): the
	// window size comes from the command line, the user agent is set per
	// page from the real one without "Headless".
	rb := rod.New().ControlURL("").Client(wc).Context(ctx).
		Monitor("").Trace(false).SlowMotion(0).NoDefaultDevice()
	// Connect must run on rb itself (it sets up rb's event hub); a hung
	// browser is caught by ending the instance at the launch deadline.
	unwatch := context.AfterFunc(lctx, cancel)
	err = rb.Connect()
	if !unwatch() && err == nil {
		err = lctx.Err()
	}
	if err != nil {
		return fail(err)
	}
	in.rb = rb
	vctx, vcancel := context.WithTimeout(ctx, 10*time.Second)
	ver, err := proto.BrowserGetVersion{}.Call(rb.Context(vctx))
	vcancel()
	if err != nil {
		return fail(err)
	}
	in.userAgent = strings.Replace(ver.UserAgent, "HeadlessChrome/", "Chrome/", 1)
	b.log.Info("browser: chromium started", "pid", in.pid)
	return in, nil
}

// launcher builds the command line: headless, a private temporary
// profile, no extensions, sync, background networking or popups. The
// process-wide proxy is the one that refuses everything: only the pages'
// browser contexts, created with the guarded proxy, reach the network.
func (b *Browser) launcher(dir string) *launcher.Launcher {
	proxyURL := "http://" + b.void.addr()
	l := launcher.New().
		Bin(b.bin).
		UserDataDir(dir).
		RemoteDebuggingPort(0).
		Headless(true).
		Devtools(false).
		NoSandbox(os.Geteuid() == 0).
		Proxy(proxyURL).
		Delete("disable-popup-blocking").
		Delete(flags.ProfileDir).
		Set("proxy-bypass-list", "<-loopback>").
		Set("disable-extensions").
		Set("disable-component-update").
		Set("disable-sync").
		Set("disable-background-networking").
		Set("disable-domain-reliability").
		Set("disable-quic").
		Set("no-default-browser-check").
		Set("no-pings").
		Set("mute-audio").
		Set("hide-scrollbars").
		Set("window-size", "1280,800").
		Set("force-webrtc-ip-handling-policy", "disable_non_proxied_udp").
		Set("webrtc-ip-handling-policy", "disable_non_proxied_udp").
		// Chromium itself resolves no host name: the proxy does, through
		// the guard. Only the loopback proxy address stays reachable.
		Set("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1")
	l.Logger(io.Discard)
	return l
}

// stop closes the browser (gracefully, then by force) and removes the
// profile. It is idempotent.
func (in *instance) stop() {
	in.stopOnce.Do(func() {
		if in.rb != nil && in.alive() {
			ctx, cancel := context.WithTimeout(in.ctx, 2*time.Second)
			_ = proto.BrowserClose{}.Call(in.rb.Context(ctx))
			cancel()
		}
		t := time.NewTimer(3 * time.Second)
		select {
		case <-in.exited:
		case <-t.C:
			killTree(in.pid)
			<-in.exited
		}
		t.Stop()
		in.cancel()
		_ = os.RemoveAll(in.dir)
	})
}

// watchedClient passes the CDP connection through to rod and ends the
// instance's context when the connection closes (Chromium exited or
// crashed), so every call in flight fails at once instead of hanging.
type watchedClient struct {
	c      *cdp.Client
	events chan *cdp.Event
}

func newWatchedClient(c *cdp.Client, gone context.CancelFunc) *watchedClient {
	w := &watchedClient{c: c, events: make(chan *cdp.Event)}
	go func() {
		defer close(w.events)
		defer gone()
		for e := range c.Event() {
			w.events <- e
		}
	}()
	return w
}

func (w *watchedClient) Event() <-chan *cdp.Event { return w.events }

func (w *watchedClient) Call(ctx context.Context, sessionID, method string, params any) ([]byte, error) {
	return w.c.Call(ctx, sessionID, method, params)
}

// connectionLost reports whether err says the CDP connection is gone.
func connectionLost(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "use of closed network connection") || strings.Contains(msg, "broken pipe") ||
		strings.Contains(msg, "connection reset")
}
