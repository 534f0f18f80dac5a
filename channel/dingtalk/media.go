package dingtalk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/personakit/persona/channel"
)

// FetchMedia turns a media segment's download code (Media.FileID: the
// downloadCode, or pictureDownloadCode, of a picture, richText picture,
// audio, video or file message) into a link: it asks the robot file
// download API (POST /v1.0/robot/messageFiles/download with the robot
// code and the access token) and returns the downloadUrl it answers as
// MediaContent.URL. That URL is a plain, short-lived link on DingTalk's
// storage that needs no credentials, so the caller fetches it through its
// public-address guard; the adapter downloads nothing itself. MIME and
// Size are m's (DingTalk declares neither; the caller sniffs the bytes).
// chat is not needed and req.Format is ignored (DingTalk converts
// nothing).
//
// Errors: channel.ErrMediaTooLarge when m.Size exceeds req.MaxBytes > 0;
// channel.ErrMediaUnavailable when m has no download code or the API
// refuses it definitively (400, 403, 404: an expired or foreign code);
// a *channel.RateLimitedError when throttled; ErrUnauthorized (also
// channel.ErrOffline, never ErrMediaUnavailable) when the credentials are
// refused; other failures are transient. Errors never
// contain the access token or the link.
func (c *Channel) FetchMedia(ctx context.Context, _ channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	if err := ctx.Err(); err != nil {
		return channel.MediaContent{}, err
	}
	if m.FileID == "" || len(m.FileID) > maxID {
		return channel.MediaContent{}, fmt.Errorf("dingtalk: fetch media: no download code: %w", channel.ErrMediaUnavailable)
	}
	if req.MaxBytes > 0 && m.Size > req.MaxBytes {
		return channel.MediaContent{}, fmt.Errorf("dingtalk: fetch media: %d bytes, at most %d wanted: %w", m.Size, req.MaxBytes, channel.ErrMediaTooLarge)
	}
	var res struct {
		DownloadURL string `json:"downloadUrl"`
	}
	err := c.apiCall(ctx, call{op: "messageFiles/download", url: c.cfg.APIBase + "/v1.0/robot/messageFiles/download",
		body: map[string]string{"downloadCode": m.FileID, "robotCode": c.cfg.RobotCode}, result: &res})
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && channel.Classify(err) == channel.ClassRejected {
			return channel.MediaContent{}, fmt.Errorf("dingtalk: fetch media: %w: %w", channel.ErrMediaUnavailable, err)
		}
		return channel.MediaContent{}, fmt.Errorf("dingtalk: fetch media: %w", err)
	}
	u, perr := url.Parse(res.DownloadURL)
	if res.DownloadURL == "" || perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return channel.MediaContent{}, fmt.Errorf("dingtalk: fetch media: the answer has no usable downloadUrl (HTTP %d): %w", http.StatusOK, channel.ErrMediaUnavailable)
	}
	return channel.MediaContent{URL: res.DownloadURL, MIME: m.MIME, Size: max(m.Size, 0)}, nil
}
