package route_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/route"
)

func TestRouterFunc(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var r route.Router = route.RouterFunc(func(_ context.Context, in route.Input) (route.Decision, error) {
		switch in.SessionKey {
		case "yes":
			return route.Decision{Reply: true}, nil
		case "err":
			return route.Decision{}, boom
		}
		return route.Decision{Code: "ignored_chat_score", Reason: "low score"}, nil
	})
	d, err := r.Route(t.Context(), route.Input{SessionKey: "yes"})
	require.NoError(t, err)
	require.True(t, d.Reply)

	d, err = r.Route(t.Context(), route.Input{SessionKey: "no"})
	require.NoError(t, err)
	require.Equal(t, route.Decision{Code: "ignored_chat_score", Reason: "low score"}, d)

	_, err = r.Route(t.Context(), route.Input{SessionKey: "err"})
	require.ErrorIs(t, err, boom)

	require.True(t, route.IgnoredRouterFailed.Valid())
	require.Equal(t, "ignored_router_failed", route.IgnoredRouterFailed.String())
}
