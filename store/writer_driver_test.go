package store

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAssign: the writer's scan conversions cover the types the store
// scans into, and refuse the rest (and NULL into a plain value) instead of
// storing a silent zero.
func TestAssign(t *testing.T) {
	t.Parallel()
	var (
		s  string
		b  []byte
		i  int
		i6 int64
		ok bool
		f  float64
		n  sql.NullInt64
		a  any
	)
	require.NoError(t, assign(&s, "text"))
	require.Equal(t, "text", s)
	require.NoError(t, assign(&s, []byte("bytes")))
	require.Equal(t, "bytes", s)
	require.NoError(t, assign(&b, "text"))
	require.Equal(t, []byte("text"), b)
	src := []byte("blob")
	require.NoError(t, assign(&b, src))
	src[0] = 'X'
	require.Equal(t, []byte("blob"), b, "a copy, not the driver's buffer")
	require.NoError(t, assign(&b, nil))
	require.Nil(t, b)
	require.NoError(t, assign(&i, int64(42)))
	require.Equal(t, 42, i)
	require.NoError(t, assign(&i6, int64(-7)))
	require.Equal(t, int64(-7), i6)
	require.NoError(t, assign(&ok, int64(1)))
	require.True(t, ok)
	require.NoError(t, assign(&ok, int64(0)))
	require.False(t, ok)
	require.NoError(t, assign(&f, int64(3)))
	require.InDelta(t, 3.0, f, 0)
	require.NoError(t, assign(&n, nil))
	require.False(t, n.Valid)
	require.NoError(t, assign(&n, int64(5)))
	require.Equal(t, sql.NullInt64{Int64: 5, Valid: true}, n)
	require.NoError(t, assign(&a, "anything"))
	require.Equal(t, "anything", a)

	require.Error(t, assign(&i, nil), "NULL into an int")
	require.Error(t, assign(&s, nil), "NULL into a string")
	require.Error(t, assign(&i, "12"), "text into an int")
	var u uint8
	require.Error(t, assign(&u, int64(1)), "an unsupported destination")
}

// TestDriverValue: arguments reach the driver as its own value types.
func TestDriverValue(t *testing.T) {
	t.Parallel()
	type label string
	for _, c := range []struct {
		in, want any
	}{
		{nil, nil}, {int64(1), int64(1)}, {7, int64(7)}, {int32(-2), int64(-2)}, {true, true}, {"s", "s"},
		{[]byte("b"), []byte("b")}, {1.5, 1.5}, {label("x"), "x"}, {sql.NullInt64{}, nil},
		{sql.NullString{String: "v", Valid: true}, "v"},
	} {
		got, err := driverValue(c.in)
		require.NoError(t, err, "%T", c.in)
		require.Equal(t, c.want, got, "%T", c.in)
	}
	_, err := driverValue(struct{}{})
	require.Error(t, err)
}
