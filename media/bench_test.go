package media_test

import (
	"context"
	"testing"

	"github.com/personakit/persona/media"
)

// BenchmarkFetchCached measures what a turn pays for a picture seen
// before: Fetch of a recorded reference and the data: URL for the model.
func BenchmarkFetchCached(b *testing.B) {
	srv := serveBytes(b, append(pngOf("bench"), make([]byte, 64<<10)...), "image/png")
	s := newService(b, media.Config{})
	ctx := context.Background()
	seg := imageSeg(srv.URL + "/pic.png")
	if _, err := s.Fetch(ctx, nil, group, seg); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		blob, err := s.Fetch(ctx, nil, group, seg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.DataURL(blob); err != nil {
			b.Fatal(err)
		}
	}
	if h := srv.hits.Load(); h != 1 {
		b.Fatalf("%d downloads", h)
	}
}
