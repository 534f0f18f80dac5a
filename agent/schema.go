package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrSchema is wrapped by every argument-validation failure of
// [ValidateArgs].
var ErrSchema = errors.New("agent: arguments do not match the tool schema")

// schemaNode is the JSON-schema subset the loop understands: type (object,
// string, number, integer, boolean, array), properties, required, enum,
// items and additionalProperties=false. Other keywords are ignored.
type schemaNode struct {
	Type                 string                 `json:"type"`
	Properties           map[string]*schemaNode `json:"properties"`
	Required             []string               `json:"required"`
	Enum                 []any                  `json:"enum"`
	Items                *schemaNode            `json:"items"`
	AdditionalProperties *bool                  `json:"additionalProperties"`
}

func parseSchema(raw json.RawMessage) (*schemaNode, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var s schemaNode
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("agent: invalid tool schema: %w", err)
	}
	return &s, nil
}

// ValidateArgs checks the model's JSON arguments against a tool's JSON
// schema and returns them canonicalised (object keys sorted, no
// whitespace). Empty arguments mean "{}"; an empty schema accepts any
// object. Values are coerced only where nothing is lost: the string "3" for
// an integer or number field, "true"/"false" for a boolean, a number for a
// string field. Anything else that does not match fails with an error
// wrapping [ErrSchema] that names the offending field.
func ValidateArgs(schema, args json.RawMessage) (json.RawMessage, error) {
	s, err := parseSchema(schema)
	if err != nil {
		return nil, err
	}
	return validateArgs(s, args)
}

func validateArgs(s *schemaNode, args json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	v, err := decodeJSON(args)
	if err != nil {
		return nil, fmt.Errorf("%w: arguments are not valid JSON: %w", ErrSchema, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: arguments must be a JSON object", ErrSchema)
	}
	if s != nil {
		if v, err = s.check(v, "arguments"); err != nil {
			return nil, err
		}
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	return out, nil
}

func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func (s *schemaNode) check(v any, path string) (any, error) {
	var err error
	typ := s.Type
	if typ == "" && s.Properties != nil {
		typ = "object"
	}
	switch typ {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, typeErr(path, "an object", v)
		}
		for _, name := range s.Required {
			if _, ok := m[name]; !ok {
				return nil, fmt.Errorf("%w: %s.%s is required", ErrSchema, path, name)
			}
		}
		for name, val := range m {
			ps, ok := s.Properties[name]
			if !ok {
				if s.AdditionalProperties != nil && !*s.AdditionalProperties {
					return nil, fmt.Errorf("%w: %s.%s is not a known field", ErrSchema, path, name)
				}
				continue
			}
			if m[name], err = ps.check(val, path+"."+name); err != nil {
				return nil, err
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return nil, typeErr(path, "an array", v)
		}
		if s.Items != nil {
			for i := range a {
				if a[i], err = s.Items.check(a[i], path+"["+strconv.Itoa(i)+"]"); err != nil {
					return nil, err
				}
			}
		}
	case "string":
		switch x := v.(type) {
		case string:
		case json.Number:
			v = x.String()
		default:
			return nil, typeErr(path, "a string", v)
		}
	case "integer":
		n, ok := toNumber(v)
		if !ok {
			return nil, typeErr(path, "an integer", v)
		}
		if i, err := n.Int64(); err == nil {
			v = json.Number(strconv.FormatInt(i, 10))
			break
		}
		f, err := n.Float64()
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil, typeErr(path, "an integer", v)
		}
		v = json.Number(strconv.FormatInt(int64(f), 10))
	case "number":
		n, ok := toNumber(v)
		if !ok {
			return nil, typeErr(path, "a number", v)
		}
		v = n
	case "boolean":
		switch x := v.(type) {
		case bool:
		case string:
			switch x {
			case "true":
				v = true
			case "false":
				v = false
			default:
				return nil, typeErr(path, "a boolean", v)
			}
		default:
			return nil, typeErr(path, "a boolean", v)
		}
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return sameJSON(e, v) }) {
		return nil, fmt.Errorf("%w: %s must be one of %s", ErrSchema, path, enumList(s.Enum))
	}
	return v, nil
}

// toNumber accepts a JSON number or a string holding exactly a JSON number
// (no spaces, no sign other than '-', so the conversion loses nothing).
func toNumber(v any) (json.Number, bool) {
	switch x := v.(type) {
	case json.Number:
		return x, true
	case string:
		if x == "" || strings.TrimSpace(x) != x || strings.HasPrefix(x, "+") {
			return "", false
		}
		var n json.Number
		if err := json.Unmarshal([]byte(x), &n); err != nil {
			return "", false
		}
		if _, err := n.Float64(); err != nil {
			return "", false
		}
		return n, true
	}
	return "", false
}

func sameJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		return false
	}
	if string(ja) == string(jb) {
		return true
	}
	// Enum numbers decode as float64, arguments as json.Number.
	fa, ok1 := a.(float64)
	nb, ok2 := b.(json.Number)
	if ok1 && ok2 {
		fb, err := nb.Float64()
		return err == nil && fa == fb
	}
	return false
}

func enumList(e []any) string {
	parts := make([]string, 0, len(e))
	for _, x := range e {
		b, _ := json.Marshal(x)
		parts = append(parts, string(b))
	}
	return strings.Join(parts, ", ")
}

func typeErr(path, want string, got any) error {
	kind := "null"
	switch got.(type) {
	case map[string]any:
		kind = "an object"
	case []any:
		kind = "an array"
	case string:
		kind = "a string"
	case json.Number:
		kind = "a number"
	case bool:
		kind = "a boolean"
	}
	return fmt.Errorf("%w: %s must be %s, got %s", ErrSchema, path, want, kind)
}
