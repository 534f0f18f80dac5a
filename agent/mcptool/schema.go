package mcptool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/personakit/persona/agent"
)

// maxSchemaBytes caps a tool's input schema; a larger one is replaced by a
// plain object schema so a misbehaving server cannot flood the prompt.
const maxSchemaBytes = 64 << 10

// anyObject is the fallback parameters schema: any JSON object.
var anyObject = json.RawMessage(`{"type":"object"}`)

// parameters turns a server's input schema into registry parameters. The
// schema is kept byte for byte when the registry can read it. The registry
// reads a subset of JSON Schema (type as one string, properties, required,
// enum, items as one schema, additionalProperties as a boolean) and fails
// on other shapes of those keywords, which MCP servers do send: type
// arrays ("type":["string","null"]), boolean schemas, tuple items, and
// additionalProperties holding a schema (every Go map field). Such a
// schema is rewritten, touching only what the registry reads: a type array
// becomes an anyOf of single types, a boolean schema becomes {} or
// {"not":{}}, tuple items become prefixItems, and a schema-valued
// additionalProperties moves into the description as text. The second
// result says why the schema was changed ("" when it was not).
func parameters(schema any) (json.RawMessage, string) {
	if schema == nil {
		return anyObject, "the server sent no input schema"
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return anyObject, "the input schema is not JSON: " + err.Error()
	}
	if len(raw) > maxSchemaBytes {
		return anyObject, fmt.Sprintf("the input schema has %d bytes (limit %d)", len(raw), maxSchemaBytes)
	}
	if registrable(raw) == nil {
		return raw, ""
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return anyObject, "the input schema is not JSON: " + err.Error()
	}
	obj, ok := root.(map[string]any)
	if !ok {
		return anyObject, "the input schema is not a JSON object"
	}
	if t, ok := obj["type"].(string); ok && t != "object" {
		return anyObject, fmt.Sprintf("the input schema has type %q, not object", t)
	}
	relaxed, err := json.Marshal(relaxNode(obj))
	if err != nil {
		return anyObject, "the input schema could not be rewritten: " + err.Error()
	}
	if err := registrable(relaxed); err != nil {
		return anyObject, "the input schema could not be rewritten: " + err.Error()
	}
	return relaxed, "rewrote schema keywords the registry cannot read"
}

// registrable reports why the registry would refuse raw as parameters.
func registrable(raw json.RawMessage) error {
	// ValidateArgs parses the schema the way Registry.Register does; with
	// empty arguments, a parsed schema fails only with ErrSchema (a missing
	// required field), never with a parse error.
	if _, err := agent.ValidateArgs(raw, nil); err != nil && !errors.Is(err, agent.ErrSchema) {
		return err
	}
	var top struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}
	if t, ok := top.Type.(string); ok && t != "" && t != "object" {
		return fmt.Errorf("type %q is not object", t)
	}
	return nil
}

// relaxNode rewrites one schema node (and the nodes the registry descends
// into: properties and items) into shapes the registry can parse.
func relaxNode(v any) any {
	switch x := v.(type) {
	case bool:
		if x {
			return map[string]any{}
		}
		return map[string]any{"not": map[string]any{}}
	case map[string]any:
		relaxType(x)
		if p, ok := x["properties"]; ok {
			if props, ok := p.(map[string]any); ok {
				for k, pv := range props {
					props[k] = relaxNode(pv)
				}
			} else {
				delete(x, "properties")
			}
		}
		if it, ok := x["items"]; ok {
			switch iv := it.(type) {
			case map[string]any, bool:
				x["items"] = relaxNode(iv)
			case []any:
				delete(x, "items")
				if _, has := x["prefixItems"]; !has {
					x["prefixItems"] = iv
				}
			default:
				delete(x, "items")
			}
		}
		if r, ok := x["required"]; ok {
			x["required"] = stringsOnly(r)
		}
		if e, ok := x["enum"]; ok {
			if _, isList := e.([]any); !isList {
				delete(x, "enum")
			}
		}
		if ap, ok := x["additionalProperties"]; ok {
			switch a := ap.(type) {
			case bool:
			case map[string]any:
				delete(x, "additionalProperties")
				if len(a) == 0 {
					x["additionalProperties"] = true
					break
				}
				if b, err := json.Marshal(a); err == nil {
					note := "Other properties must match " + string(b) + "."
					if d, ok := x["description"].(string); ok && strings.TrimSpace(d) != "" {
						note = strings.TrimSpace(d) + " " + note
					}
					x["description"] = note
				}
			default:
				delete(x, "additionalProperties")
			}
		}
		return x
	default:
		// A number, string or array where a schema belongs: accept anything.
		return map[string]any{}
	}
}

// relaxType turns a type array into an anyOf of single types.
func relaxType(x map[string]any) {
	t, ok := x["type"]
	if !ok {
		return
	}
	switch tt := t.(type) {
	case string:
		return
	case []any:
		delete(x, "type")
		alts := make([]any, 0, len(tt))
		for _, e := range tt {
			if s, ok := e.(string); ok {
				alts = append(alts, map[string]any{"type": s})
			}
		}
		switch {
		case len(alts) == 0:
		case len(alts) == 1:
			x["type"] = alts[0].(map[string]any)["type"]
		default:
			if _, has := x["anyOf"]; !has {
				x["anyOf"] = alts
				break
			}
			all, _ := x["allOf"].([]any)
			x["allOf"] = append(all, map[string]any{"anyOf": alts})
		}
	default:
		delete(x, "type")
	}
}

func stringsOnly(v any) []any {
	list, _ := v.([]any)
	out := make([]any, 0, len(list))
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
