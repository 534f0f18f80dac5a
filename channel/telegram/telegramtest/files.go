package telegramtest

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// downloadFailure is the failures-queue key of FailNextDownload.
const downloadFailure = "*download"

type storedFile struct {
	path string
	data []byte
}

// AddFile registers the content of a file id, so getFile answers it with
// its size and a file_path, and GET <URL>/file/bot<token>/<file_path>
// serves data. It returns the file_path. Registering an id again replaces
// its content (and path). Reference the id in an Incoming's media.
func (s *Server) AddFile(fileID string, data []byte) (filePath string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextFile++
	filePath = "files/file_" + strconv.Itoa(s.nextFile)
	s.files[fileID] = &storedFile{path: filePath, data: slices.Clone(data)}
	return filePath
}

// RemoveFile forgets a file id: getFile then answers 400 and a download of
// its old path 404, as for an expired file.
func (s *Server) RemoveFile(fileID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.files, fileID)
}

// Downloads returns the file paths requested from /file/, in order (with
// the right token or not, found or not).
func (s *Server) Downloads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.downloads)
}

// FailNextDownload makes the next file download fail with f (e.g. a 404,
// a 5xx or Failure.Drop). Use FailNext("getFile", f) for getFile.
func (s *Server) FailNextDownload(f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, pendingFailure{method: downloadFailure, f: f})
}

// getFile answers like the Bot API: the File with file_path for a known
// id, 400 "invalid file_id" for an unknown one and 400 "file is too big"
// above Config.MaxDownloadBytes.
func (s *Server) getFile(w http.ResponseWriter, p params) {
	id, _ := p.str("file_id")
	if id == "" {
		badRequest(w, "file_id is empty")
		return
	}
	s.mu.Lock()
	f, ok := s.files[id]
	s.mu.Unlock()
	switch {
	case !ok:
		badRequest(w, "invalid file_id")
	case int64(len(f.data)) > s.cfg.MaxDownloadBytes:
		badRequest(w, "file is too big")
	default:
		writeOK(w, FileInfo{FileID: id, FileUniqueID: "u-" + id, FileSize: int64(len(f.data)), FilePath: f.path})
	}
}

// serveFile serves /file/bot<token>/<file_path> (rest is the part after
// "/file/bot"). A wrong token or an unknown path is 404, as on the Bot
// API's file server.
func (s *Server) serveFile(w http.ResponseWriter, rest string) {
	token, path, _ := strings.Cut(rest, "/")
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	s.mu.Lock()
	s.downloads = append(s.downloads, path)
	s.notifyLocked()
	offline := s.offline
	var fail *Failure
	if i := slices.IndexFunc(s.failures, func(pf pendingFailure) bool { return pf.method == downloadFailure }); i >= 0 && !offline {
		f := s.failures[i].f
		fail = &f
		s.failures = slices.Delete(s.failures, i, i+1)
	}
	var data []byte
	found := false
	if token == s.token && fail == nil {
		for _, f := range s.files {
			if f.path == path {
				data, found = f.data, true
				break
			}
		}
	}
	s.mu.Unlock()
	switch {
	case offline:
		s.serveOffline(w)
	case fail != nil:
		writeError(w, *fail)
	case !found:
		writeError(w, Failure{Code: http.StatusNotFound, Description: "Not Found"})
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data)
	}
}
