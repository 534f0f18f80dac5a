package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/personakit/persona/agent"
)

// Model is an [agent.Model] backed by an OpenAI-compatible Chat Completions
// endpoint. Create it with [New]; it is safe for concurrent use.
type Model struct {
	chat                oai.ChatCompletionService
	model               string
	purposeModels       map[string]string
	timeout             time.Duration
	maxCompletionTokens bool
	vision              bool
}

var (
	_ agent.Model      = (*Model)(nil)
	_ agent.ImageInput = (*Model)(nil)
)

// New validates cfg and returns a Model. It never reads the process
// environment (use [FromEnv] for that) and disables the SDK's own retries:
// failed calls are retried by the caller (the inbound queue).
func New(cfg Config) (*Model, error) {
	base, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	opts := clientOptions(base, cfg.APIKey, cfg.HTTPClient)
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return &Model{
		chat:                oai.NewChatCompletionService(opts...),
		model:               cfg.Model,
		purposeModels:       maps.Clone(cfg.PurposeModels),
		timeout:             timeout,
		maxCompletionTokens: cfg.MaxCompletionTokens,
		vision:              cfg.Vision,
	}, nil
}

// AcceptsImages reports Config.Vision: whether requests may carry image
// parts ([agent.ImageInput]).
func (m *Model) AcceptsImages() bool { return m.vision }

// ModelFor returns the model name used for requests with the given purpose:
// its Config.PurposeModels entry, else Config.Model.
func (m *Model) ModelFor(purpose string) string {
	if name, ok := m.purposeModels[purpose]; ok {
		return name
	}
	return m.model
}

// Generate sends req as one Chat Completions call and converts the first
// choice. Errors are [*agent.Error] values classified by HTTP status and
// provider error code; a finish reason of "content_filter" (or a bare
// refusal) is reported as [agent.KindContentPolicy].
func (m *Model) Generate(ctx context.Context, req agent.Request) (*agent.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextError(err, err)
	}
	modelName := m.ModelFor(req.Purpose)
	params, err := m.params(modelName, req)
	if err != nil {
		return nil, &agent.Error{Kind: agent.KindInvalidRequest, Message: err.Error(), Err: err}
	}

	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	var httpResp *http.Response
	cc, err := m.chat.New(ctx, params, option.WithResponseInto(&httpResp))
	if err != nil {
		return nil, classify(ctx, err, httpResp)
	}
	return convertResponse(cc, modelName)
}

// params converts req into the SDK's request body.
func (m *Model) params(modelName string, req agent.Request) (oai.ChatCompletionNewParams, error) {
	p := oai.ChatCompletionNewParams{Model: modelName}
	if len(req.Messages) == 0 {
		return p, errors.New("openai: request has no messages")
	}
	p.Messages = make([]oai.ChatCompletionMessageParamUnion, 0, len(req.Messages))
	for i, msg := range req.Messages {
		mp, err := messageParam(msg)
		if err != nil {
			return p, fmt.Errorf("openai: message %d: %w", i, err)
		}
		p.Messages = append(p.Messages, mp)
	}
	if len(req.Tools) > 0 {
		p.Tools = make([]oai.ChatCompletionToolUnionParam, 0, len(req.Tools))
		for _, t := range req.Tools {
			fd, err := functionDefinition(t)
			if err != nil {
				return p, err
			}
			p.Tools = append(p.Tools, oai.ChatCompletionFunctionTool(fd))
		}
	}
	switch req.ToolChoice {
	case "":
	case "none", "auto", "required":
		p.ToolChoice = oai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: param.NewOpt(req.ToolChoice)}
	default:
		p.ToolChoice = oai.ToolChoiceOptionFunctionToolChoice(oai.ChatCompletionNamedToolChoiceFunctionParam{Name: req.ToolChoice})
	}
	if req.MaxTokens > 0 {
		if m.maxCompletionTokens {
			p.MaxCompletionTokens = param.NewOpt(int64(req.MaxTokens))
		} else {
			p.MaxTokens = param.NewOpt(int64(req.MaxTokens))
		}
	}
	if req.Temperature != nil {
		p.Temperature = param.NewOpt(*req.Temperature)
	}
	if req.JSON {
		jo := shared.NewResponseFormatJSONObjectParam()
		p.ResponseFormat = oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &jo}
	}
	return p, nil
}

// messageParam converts one prompt message. CacheBreakpoint is not sent:
// OpenAI-compatible endpoints cache stable prefixes automatically.
func messageParam(msg agent.Message) (oai.ChatCompletionMessageParamUnion, error) {
	var name param.Opt[string]
	if msg.Name != "" {
		name = param.NewOpt(msg.Name)
	}
	if len(msg.Parts) > 0 && msg.Role != agent.RoleUser {
		return oai.ChatCompletionMessageParamUnion{}, fmt.Errorf("image parts are only supported on user messages, not %q", msg.Role)
	}
	switch msg.Role {
	case agent.RoleSystem:
		return oai.ChatCompletionMessageParamUnion{OfSystem: &oai.ChatCompletionSystemMessageParam{
			Content: oai.ChatCompletionSystemMessageParamContentUnion{OfString: param.NewOpt(msg.Content)},
			Name:    name,
		}}, nil
	case agent.RoleUser:
		u := &oai.ChatCompletionUserMessageParam{Name: name}
		if len(msg.Parts) == 0 {
			u.Content.OfString = param.NewOpt(msg.Content)
		} else {
			parts := make([]oai.ChatCompletionContentPartUnionParam, 0, len(msg.Parts)+1)
			if msg.Content != "" {
				parts = append(parts, oai.TextContentPart(msg.Content))
			}
			for j, part := range msg.Parts {
				if part.ImageURL == "" {
					return oai.ChatCompletionMessageParamUnion{}, fmt.Errorf("part %d has no image URL", j)
				}
				parts = append(parts, oai.ImageContentPart(oai.ChatCompletionContentPartImageImageURLParam{
					URL:    part.ImageURL,
					Detail: part.Detail,
				}))
			}
			u.Content.OfArrayOfContentParts = parts
		}
		return oai.ChatCompletionMessageParamUnion{OfUser: u}, nil
	case agent.RoleAssistant:
		a := &oai.ChatCompletionAssistantMessageParam{Name: name}
		if msg.Content != "" || len(msg.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(msg.Content)
		}
		if len(msg.ToolCalls) > 0 {
			a.ToolCalls = make([]oai.ChatCompletionMessageToolCallUnionParam, 0, len(msg.ToolCalls))
			for _, tc := range msg.ToolCalls {
				args := string(tc.Arguments)
				if len(bytes.TrimSpace(tc.Arguments)) == 0 {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: args,
						},
					},
				})
			}
		}
		return oai.ChatCompletionMessageParamUnion{OfAssistant: a}, nil
	case agent.RoleTool:
		if msg.ToolCallID == "" {
			return oai.ChatCompletionMessageParamUnion{}, errors.New("tool message without tool_call_id")
		}
		return oai.ChatCompletionMessageParamUnion{OfTool: &oai.ChatCompletionToolMessageParam{
			Content:    oai.ChatCompletionToolMessageParamContentUnion{OfString: param.NewOpt(msg.Content)},
			ToolCallID: msg.ToolCallID,
		}}, nil
	default:
		return oai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", msg.Role)
	}
}

// functionDefinition converts a tool spec; Parameters must be a JSON object.
func functionDefinition(t agent.ToolSpec) (shared.FunctionDefinitionParam, error) {
	fd := shared.FunctionDefinitionParam{Name: t.Name}
	if t.Name == "" {
		return fd, errors.New("openai: tool without a name")
	}
	if t.Description != "" {
		fd.Description = param.NewOpt(t.Description)
	}
	if len(bytes.TrimSpace(t.Parameters)) > 0 {
		// Top-level keys only; nested values are sent byte-for-byte.
		var schema map[string]json.RawMessage
		if err := json.Unmarshal(t.Parameters, &schema); err != nil {
			return fd, fmt.Errorf("openai: tool %q: parameters must be a JSON object: %w", t.Name, err)
		}
		if schema == nil {
			return fd, fmt.Errorf("openai: tool %q: parameters must be a JSON object, not null", t.Name)
		}
		fd.Parameters = make(shared.FunctionParameters, len(schema))
		for k, v := range schema {
			fd.Parameters[k] = v
		}
	}
	return fd, nil
}

// convertResponse turns the SDK response into an agent.Response.
func convertResponse(cc *oai.ChatCompletion, requested string) (*agent.Response, error) {
	if cc == nil || len(cc.Choices) == 0 {
		return nil, &agent.Error{Kind: agent.KindServer, Status: http.StatusOK, Message: "malformed response: no choices"}
	}
	ch := cc.Choices[0]
	if ch.FinishReason == "content_filter" {
		return nil, &agent.Error{Kind: agent.KindContentPolicy, Status: http.StatusOK,
			Message: "the provider's content filter blocked the response (finish_reason content_filter)"}
	}
	resp := &agent.Response{
		Text:         ch.Message.Content,
		FinishReason: ch.FinishReason,
		Model:        cc.Model,
		Usage:        usage(cc.Usage),
	}
	if resp.Model == "" {
		resp.Model = requested
	}
	if n := len(ch.Message.ToolCalls); n > 0 {
		resp.ToolCalls = make([]agent.ToolCall, 0, n)
		for _, tc := range ch.Message.ToolCalls {
			name, args := tc.Function.Name, tc.Function.Arguments
			if tc.Type == "custom" {
				name = tc.Custom.Name
				b, _ := json.Marshal(tc.Custom.Input)
				args = string(b)
			}
			if args == "" {
				args = "{}"
			}
			resp.ToolCalls = append(resp.ToolCalls, agent.ToolCall{ID: tc.ID, Name: name, Arguments: json.RawMessage(args)})
		}
	}
	if resp.Text == "" && len(resp.ToolCalls) == 0 && ch.Message.Refusal != "" {
		return nil, &agent.Error{Kind: agent.KindContentPolicy, Status: http.StatusOK, Message: "model refused: " + ch.Message.Refusal}
	}
	return resp, nil
}

// usage converts token accounting, including cached prompt tokens
// (usage.prompt_tokens_details.cached_tokens, or DeepSeek-style
// usage.prompt_cache_hit_tokens).
func usage(u oai.CompletionUsage) agent.Usage {
	out := agent.Usage{
		InputTokens:       int(u.PromptTokens),
		CachedInputTokens: int(u.PromptTokensDetails.CachedTokens),
		OutputTokens:      int(u.CompletionTokens),
	}
	if out.CachedInputTokens == 0 {
		if f, ok := u.JSON.ExtraFields["prompt_cache_hit_tokens"]; ok {
			var n int64
			if json.Unmarshal([]byte(f.Raw()), &n) == nil && n > 0 {
				out.CachedInputTokens = int(n)
			}
		}
	}
	return out
}
