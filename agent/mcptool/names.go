package mcptool

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/personakit/persona/agent"
)

// maxToolName is the registry's limit on a tool name.
const maxToolName = 64

// builtinNames are the loop's own tools; no MCP tool may take their names.
var builtinNames = []string{agent.ToolFinalize, agent.ToolSay, agent.ToolsLoad, agent.ToolsExecute}

// toolName maps a server's tool to "<server>_<tool>" in the registry's
// charset: every rune outside [A-Za-z0-9_-] becomes '_', and a name over 64
// characters keeps its start and gets a hash of the full tool name, so two
// long names that share a prefix stay apart. server is a validated server
// name, so the result starts with a letter.
func toolName(server, tool string) string {
	var b strings.Builder
	b.Grow(len(server) + 1 + len(tool))
	b.WriteString(server)
	b.WriteByte('_')
	for _, r := range tool {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) <= maxToolName {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(tool))
	suffix := fmt.Sprintf("_%08x", h.Sum32())
	return name[:maxToolName-len(suffix)] + suffix
}

// uniqueName returns name, or name with the smallest suffix "_2", "_3", …
// that is not taken (shortening the name to stay within 64 characters).
func uniqueName(name string, taken map[string]bool) string {
	if !taken[name] {
		return name
	}
	for i := 2; ; i++ {
		suffix := "_" + strconv.Itoa(i)
		base := name
		if len(base)+len(suffix) > maxToolName {
			base = base[:maxToolName-len(suffix)]
		}
		if cand := base + suffix; !taken[cand] {
			return cand
		}
	}
}
