package browser_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/personakit/persona/agent/browser"
)

func ExampleBrowser_Render() {
	// A page that writes its greeting with JavaScript.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<title>Greetings</title><p id=g></p>`+
			`<script>document.getElementById("g").textContent = "Hello, " + "reader."</script>`)
	}))
	defer srv.Close()

	b, err := browser.New(browser.Config{
		Bin: "/usr/bin/chromium",
		// Production guards allow public addresses only; the example's
		// server is on loopback.
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	page, err := b.Render(context.Background(), srv.URL, browser.RenderOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(page.Title)
	fmt.Println(page.Text)

	_, err = b.Render(context.Background(), "http://169.254.169.254/latest/meta-data/", browser.RenderOptions{})
	fmt.Println(err)
	// Output:
	// Greetings
	// Hello, reader.
	// refused: http://169.254.169.254/latest/meta-data/: address is not public: 169.254.169.254 (metadata)
}
