package agent_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
)

func TestRegistryRegister(t *testing.T) {
	t.Parallel()
	mk := func(name, params string) agent.Tool {
		return agent.ToolFunc{ToolSpec: agent.ToolSpec{Name: name, Parameters: json.RawMessage(params)},
			F: func(context.Context, json.RawMessage) (string, error) { return "", nil }}
	}
	tests := []struct {
		name    string
		tool    agent.Tool
		opts    []agent.ToolOption
		wantErr error
	}{
		{name: "ok", tool: mk("web_search", `{"type":"object"}`)},
		{name: "duplicate", tool: mk("dup", ``), wantErr: agent.ErrToolDuplicate},
		{name: "empty name", tool: mk("", ``), wantErr: agent.ErrToolName},
		{name: "bad name", tool: mk("has space", ``), wantErr: agent.ErrToolName},
		{name: "builtin name", tool: mk(agent.ToolsLoad, ``), wantErr: agent.ErrToolName},
		{name: "nil tool", tool: nil, wantErr: agent.ErrToolName},
		{name: "non-object schema", tool: mk("arr", `{"type":"array"}`), wantErr: nil},
		{name: "invalid schema JSON", tool: mk("bad_schema", `{`), wantErr: nil},
		{name: "negative quota", tool: mk("neg", ``), opts: []agent.ToolOption{agent.Quota(-1)}, wantErr: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := agent.NewRegistry()
			require.NoError(t, r.Register(mk("dup", ``)))
			err := r.Register(tt.tool, tt.opts...)
			switch {
			case tt.wantErr != nil:
				require.ErrorIs(t, err, tt.wantErr)
			case tt.name == "ok":
				require.NoError(t, err)
				got, ok := r.Lookup("web_search")
				require.True(t, ok)
				require.Equal(t, "web_search", got.Spec().Name)
				require.Equal(t, []string{"dup", "web_search"}, r.Names())
			default:
				require.Error(t, err)
			}
		})
	}
	require.Panics(t, func() { agent.NewRegistry().MustRegister(mk("", ``)) })
}

func TestValidateArgs(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{
		"n":{"type":"integer"},"x":{"type":"number"},"s":{"type":"string"},"b":{"type":"boolean"},
		"mode":{"type":"string","enum":["fast","slow"]},"k":{"type":"integer","enum":[1,2]},
		"tags":{"type":"array","items":{"type":"string"}},
		"o":{"type":"object","properties":{"deep":{"type":"integer"}},"required":["deep"],"additionalProperties":false}},
		"required":["n"]}`)
	tests := []struct {
		name, args, want, err string
	}{
		{name: "canonical", args: `{ "x": 1.5, "n": 2 }`, want: `{"n":2,"x":1.5}`},
		{name: "empty args with required", args: ``, err: "arguments.n is required"},
		{name: "string to integer", args: `{"n":"3"}`, want: `{"n":3}`},
		{name: "integral float to integer", args: `{"n":3.0}`, want: `{"n":3}`},
		{name: "lossy integer", args: `{"n":"3.5"}`, err: "arguments.n must be an integer"},
		{name: "leading zero refused", args: `{"n":"03"}`, err: "must be an integer"},
		{name: "padded refused", args: `{"n":" 3"}`, err: "must be an integer"},
		{name: "string to number", args: `{"n":1,"x":"2.25"}`, want: `{"n":1,"x":2.25}`},
		{name: "number to string", args: `{"n":1,"s":12}`, want: `{"n":1,"s":"12"}`},
		{name: "string to boolean", args: `{"n":1,"b":"true"}`, want: `{"b":true,"n":1}`},
		{name: "bad boolean", args: `{"n":1,"b":"yes"}`, err: "arguments.b must be a boolean"},
		{name: "enum", args: `{"n":1,"mode":"fast","k":2}`, want: `{"k":2,"mode":"fast","n":1}`},
		{name: "enum miss", args: `{"n":1,"mode":"warp"}`, err: `arguments.mode must be one of "fast", "slow"`},
		{name: "enum number miss", args: `{"n":1,"k":3}`, err: "arguments.k must be one of 1, 2"},
		{name: "array items", args: `{"n":1,"tags":["a",2]}`, want: `{"n":1,"tags":["a","2"]}`},
		{name: "array type", args: `{"n":1,"tags":"a"}`, err: "arguments.tags must be an array, got a string"},
		{name: "nested required", args: `{"n":1,"o":{}}`, err: "arguments.o.deep is required"},
		{name: "nested extra", args: `{"n":1,"o":{"deep":1,"z":0}}`, err: "arguments.o.z is not a known field"},
		{name: "not an object", args: `[1]`, err: "must be a JSON object"},
		{name: "garbage", args: `{"n":`, err: "not valid JSON"},
		{name: "trailing data", args: `{"n":1} {}`, err: "not valid JSON"},
		{name: "null value", args: `{"n":null}`, err: "must be an integer, got null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := agent.ValidateArgs(schema, json.RawMessage(tt.args))
			if tt.err != "" {
				require.ErrorIs(t, err, agent.ErrSchema)
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(got))
			require.Equal(t, tt.want, string(got), "canonical key order")
		})
	}
	got, err := agent.ValidateArgs(nil, json.RawMessage(`{"any":1}`))
	require.NoError(t, err)
	require.Equal(t, `{"any":1}`, string(got))
}

func TestNewLoopConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []agent.LoopConfig{
		{Steps: 33}, {OwnerSteps: 40}, {ToolOutputChars: 20001}, {Repairs: -1}, {ToolTimeout: -1},
	} {
		_, err := agent.NewLoop(cfg)
		require.ErrorIs(t, err, agent.ErrLoopConfig)
	}
	l, err := agent.NewLoop(agent.LoopConfig{Steps: 32, ToolOutputChars: 20000})
	require.NoError(t, err)
	require.NotNil(t, l.Registry())
}
