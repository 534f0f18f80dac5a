package dingtalktest

import (
	"cmp"
	"net/http"
	"strconv"
	"time"
)

// DefaultLinkTTL is how long a download link stays valid.
const DefaultLinkTTL = time.Hour

// file is media the fake holds under a download code.
type file struct {
	data []byte
	mime string
}

// AddFile registers content under a download code (a fresh one when code
// is empty) and returns the code. The robot file download API then
// answers a downloadUrl on the fake that serves the bytes without
// credentials, as DingTalk's storage links do.
func (s *Server) AddFile(code string, data []byte, mime string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == "" {
		code = "dc" + randHex(12)
	}
	s.files[code] = &file{data: append([]byte(nil), data...), mime: cmp.Or(mime, "application/octet-stream")}
	return code
}

// RemoveFile forgets a download code (the download API then refuses it).
func (s *Server) RemoveFile(code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.files, code)
}

// Downloads lists the download codes the download API was asked for.
func (s *Server) Downloads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.downloads...)
}

// handleDownload is POST /v1.0/robot/messageFiles/download.
func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	var req struct {
		DownloadCode string `json:"downloadCode"`
		RobotCode    string `json:"robotCode"`
	}
	if err := readJSON(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, CodeBadParameter, "the body is not JSON")
		return
	}
	s.mu.Lock()
	f, failed := s.takeFailureLocked(OpDownload)
	s.downloads = append(s.downloads, req.DownloadCode)
	_, ok := s.files[req.DownloadCode]
	s.mu.Unlock()
	if failed {
		s.fail(w, r, f)
		return
	}
	switch {
	case req.RobotCode != s.cfg.RobotCode:
		apiError(w, http.StatusBadRequest, "invalidParameter.robotCode.auth", "this app's key does not match the robot code")
		return
	case !ok:
		apiError(w, http.StatusBadRequest, CodeBadDownloadCode, "the download code is invalid or expired")
		return
	}
	key := randHex(16)
	s.mu.Lock()
	s.links[key] = req.DownloadCode
	exp := s.clk.Now().Add(DefaultLinkTTL)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{
		"downloadUrl": s.hs.URL + "/oss/" + key + "?Expires=" + strconv.FormatInt(exp.Unix(), 10) + "&Signature=fake" + randHex(8)})
}

// handleOSS serves a download link: GET /oss/{key}.
func (s *Server) handleOSS(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	code, ok := s.links[r.PathValue("key")]
	f := s.files[code]
	s.mu.Unlock()
	exp, err := strconv.ParseInt(r.URL.Query().Get("Expires"), 10, 64)
	if !ok || f == nil || err != nil || !s.clk.Now().Before(time.Unix(exp, 0)) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte("<Error><Code>AccessDenied</Code></Error>"))
		return
	}
	w.Header().Set("Content-Type", f.mime)
	w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
	_, _ = w.Write(f.data)
}
