package mcptool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/mcptool"
)

// Open an MCP server's tools, register them in an agent registry and call
// one the way the agent loop does.
func ExampleOpen() {
	// An MCP server with one tool, served over streamable HTTP.
	server := mcp.NewServer(&mcp.Implementation{Name: "weather", Version: "1.0.0"}, nil)
	type forecastIn struct {
		City string `json:"city" jsonschema:"the city to forecast"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "forecast", Description: "Tomorrow's weather for a city."},
		func(_ context.Context, _ *mcp.CallToolRequest, in forecastIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Sunny in " + in.City}}}, nil, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	defer ts.Close()
	defer ts.CloseClientConnections()

	ctx := context.Background()
	src, err := mcptool.Open(ctx, []mcptool.Server{{Name: "weather", URL: ts.URL, Tiers: []string{"friend"}}}, mcptool.Options{Logger: quietLogger()})
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer src.Close()

	reg := agent.NewRegistry()
	if err := src.Register(reg); err != nil {
		fmt.Println("register:", err)
		return
	}
	fmt.Println(strings.Join(reg.Names(), ", "))

	tool, _ := reg.Lookup("weather_forecast")
	fmt.Println(tool.Spec().Description)
	out, err := tool.Call(ctx, json.RawMessage(`{"city":"Lisbon"}`))
	fmt.Println(out, err)
	// Output:
	// weather_forecast
	// Tomorrow's weather for a city.
	// Sunny in Lisbon <nil>
}
