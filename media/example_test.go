package media_test

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/personakit/persona/media"
)

func ExampleCache() {
	dir, err := os.MkdirTemp("", "media-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	cache, err := media.OpenCache(media.CacheConfig{Dir: dir})
	if err != nil {
		panic(err)
	}
	// The type comes from the bytes, not from what the sender declared.
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	b, err := cache.Put(context.Background(), bytes.NewReader(png), "image/jpeg", 0)
	if err != nil {
		panic(err)
	}
	_ = cache.SetRef("telegram\x00group:42\x00AgADBAAD", b.SHA256)
	_ = cache.SetNote(b.SHA256, media.NoteDescription, "a tiny picture")

	again, _ := cache.Ref("telegram\x00group:42\x00AgADBAAD")
	note, _ := cache.Note(again.SHA256, media.NoteDescription)
	fmt.Println(b.MIME, b.Size, again == b, note)
	// Output: image/png 16 true a tiny picture
}
