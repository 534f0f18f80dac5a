package agent

import "context"

// Models routes each call to the model group for its purpose (chat,
// vision, router, audit, …) and implements Model itself, so it can be passed wherever one model
// is expected. Every nil group falls back to Chat.
//
//   - a request with image parts goes to Vision when Vision is set;
//   - PurposeVision → Vision, PurposeRouter → Router, PurposeAudit → Audit,
//     PurposeSummary → Summary;
//   - any purpose found in ByPurpose (e.g. PurposeClassify, PurposeDedup)
//     goes there;
//   - everything else → Chat.
//
// Models is a value with no state; it is safe for concurrent use when its
// models are.
type Models struct {
	Chat    Model
	Vision  Model
	Router  Model
	Audit   Model
	Summary Model
	// ByPurpose adds or overrides groups for other purposes.
	ByPurpose map[string]Model
}

var _ Model = Models{}

// For returns the model that serves req (nil only when nothing, not even
// Chat, is configured).
func (m Models) For(req Request) Model {
	if m.Vision != nil && (req.Purpose == PurposeVision || hasImages(req.Messages)) {
		return m.Vision
	}
	if x := m.ByPurpose[req.Purpose]; x != nil {
		return x
	}
	var x Model
	switch req.Purpose {
	case PurposeRouter:
		x = m.Router
	case PurposeAudit:
		x = m.Audit
	case PurposeSummary:
		x = m.Summary
	}
	if x == nil {
		x = m.Chat
	}
	return x
}

// Generate calls the model For(req); it returns ErrNoModel when none is
// configured.
func (m Models) Generate(ctx context.Context, req Request) (*Response, error) {
	x := m.For(req)
	if x == nil {
		return nil, ErrNoModel
	}
	return x.Generate(ctx, req)
}
