package onebottest

import (
	"encoding/base64"
	"maps"
	"slices"
	"strconv"
)

// MediaFile is a media file the fake serves through get_image, get_record
// and get_file (see Server.AddMedia).
type MediaFile struct {
	// Bytes is the content.
	Bytes []byte
	// Base64 puts the content in the answer's base64 field (NapCat). It is
	// also used when URL and LocalPath are both empty.
	Base64 bool
	// URL, when set, is the answer's url field.
	URL string
	// LocalPath, when set, is the answer's file field: a path on the
	// implementation's machine (the v11 answer). The fake does not write
	// it; the test does.
	LocalPath string
	// Formats maps a get_record out_format ("mp3") to the converted clip.
	// A conversion is answered with base64 only; an out_format missing
	// here gets the clip as stored.
	Formats map[string][]byte
	// Name is the answer's file_name and filename (default: the file id).
	Name string
	// Size is the declared size, answered as file_size (a string, as
	// NapCat) and size (a number, as go-cqhttp); 0 is len(Bytes), a
	// negative size declares none.
	Size int64
}

// AddMedia registers a media file under the id segments and the media
// actions use (the file of get_image and get_record, the file_id or file
// of get_file). Unknown ids are answered with RetcodeFailed, a call
// without the id with 1400. Registering an id again replaces it.
func (s *Server) AddMedia(file string, f MediaFile) {
	f.Bytes = slices.Clone(f.Bytes)
	f.Formats = maps.Clone(f.Formats)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.media[file] = f
}

// getMedia answers get_image, get_record and get_file.
func (s *Server) getMedia(action string, p params) result {
	id := p.str("file")
	if action == "get_file" {
		id = cmpOr(p.str("file_id"), id)
	}
	if id == "" {
		return failResult(1400, "file required")
	}
	s.mu.Lock()
	f, ok := s.media[id]
	s.mu.Unlock()
	if !ok {
		return failResult(RetcodeFailed, "file not found")
	}
	content, converted := f.Bytes, false
	if out := p.str("out_format"); action == "get_record" && out != "" {
		if b, ok := f.Formats[out]; ok {
			content, converted = b, true
		}
	}
	size := f.Size
	if size == 0 || converted {
		size = int64(len(content))
	}
	name := cmpOr(f.Name, id)
	d := map[string]any{"file_name": name, "filename": name}
	if size >= 0 {
		// NapCat's file_size is a string, go-cqhttp's size a number.
		d["file_size"], d["size"] = strconv.FormatInt(size, 10), size
	}
	if converted || f.Base64 || (f.URL == "" && f.LocalPath == "") {
		d["base64"] = base64.StdEncoding.EncodeToString(content)
	}
	if !converted && f.URL != "" {
		d["url"] = f.URL
	}
	if !converted && f.LocalPath != "" {
		d["file"] = f.LocalPath
	}
	return okResult(d)
}
