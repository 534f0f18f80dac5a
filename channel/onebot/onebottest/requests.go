package onebottest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"
)

// FriendRequest is a user asking the bot account to become friends.
type FriendRequest struct {
	// UserID is the requester.
	UserID int64
	// Comment is the text the requester attached ("" = none).
	Comment string
	// Flag is the request's handle ("" = assigned by the fake).
	Flag string
	// Time is when the request was made (zero = the clock's now).
	Time time.Time
}

// FriendAnswer is one answer to a friend request that the fake accepted
// (set_friend_add_request with the flag of a pending request).
type FriendAnswer struct {
	// Flag is the answered request's flag.
	Flag string
	// UserID is the requester.
	UserID int64
	// Approve is the answer (the protocol's default, true, when the
	// parameter was absent).
	Approve bool
	// Remark is the remark parameter ("" when absent).
	Remark string
}

// EmitFriendRequest makes a friend request pending and pushes its request
// event (post_type "request", request_type "friend", with user_id, comment
// and flag) to the adapter. It returns the flag, and the HTTP POST error
// if any. A request stays pending until set_friend_add_request answers it;
// re-using the flag of a pending request pushes the event again (a
// redelivery).
func (s *Server) EmitFriendRequest(ctx context.Context, req FriendRequest) (string, error) {
	if req.UserID <= 0 {
		return "", errors.New("onebottest: EmitFriendRequest needs a positive UserID")
	}
	at := req.Time
	if at.IsZero() {
		at = s.clk.Now()
	}
	s.mu.Lock()
	if req.Flag == "" {
		s.nrequest++
		req.Flag = "friend-" + strconv.FormatInt(req.UserID, 10) + "-" + strconv.FormatInt(s.nrequest, 10)
	}
	s.requests[req.Flag] = req.UserID
	s.notifyLocked()
	s.mu.Unlock()
	return req.Flag, s.PushEvent(ctx, map[string]any{
		"time": at.Unix(), "self_id": s.cfg.SelfID, "post_type": "request", "request_type": "friend",
		"user_id": req.UserID, "comment": req.Comment, "flag": req.Flag,
	})
}

// FriendAnswers returns the accepted answers to friend requests, in order.
func (s *Server) FriendAnswers() []FriendAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.answers)
}

// answerFriendRequest answers set_friend_add_request: the flag must name a
// pending request (else RetcodeFailed, as for an expired or handled one);
// approve defaults to true as the protocol says. An approved requester
// joins the friend list (named by the remark, if any). No friend_add
// notice is pushed.
func (s *Server) answerFriendRequest(p params) result {
	flag := p.str("flag")
	if flag == "" {
		return failResult(1400, "flag required")
	}
	approve := true
	if _, ok := p["approve"]; ok {
		approve = p.bool("approve")
	}
	remark := p.str("remark")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offline {
		return failResult(RetcodeFailed, "account offline")
	}
	user, ok := s.requests[flag]
	if !ok {
		return failResult(RetcodeFailed, "no pending friend request with this flag")
	}
	delete(s.requests, flag)
	s.answers = append(s.answers, FriendAnswer{Flag: flag, UserID: user, Approve: approve, Remark: remark})
	if approve {
		s.friends[user] = cmpOr(remark, "user "+strconv.FormatInt(user, 10))
	}
	s.notifyLocked()
	return okResult(nil)
}
