package eventcenter

import (
	"embed"
	"html/template"
	"net/http"
)

// static holds the page: its HTML template, script and style sheet. No
// build step and no assets from elsewhere.
//
//go:embed static/index.html static/app.js static/app.css
var static embed.FS

// pageTemplate is the page's HTML; it takes the title only and holds no
// data (the script fetches everything with the token).
var pageTemplate = template.Must(template.ParseFS(static, "static/index.html"))

// servePage serves the page shell to anyone: it shows the token prompt
// until the API accepts a token.
func (c *Center) servePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(c.page)
}

// serveAsset serves one embedded file.
func serveAsset(name, contentType string) http.HandlerFunc {
	b, err := static.ReadFile("static/" + name)
	if err != nil {
		panic("eventcenter: missing embedded asset " + name) // the embed directive lists it
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(b)
	}
}
