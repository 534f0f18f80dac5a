package feishu_test

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
)

// TestFrameGolden checks the encoding byte by byte against the protobuf
// wire format (varint fields 1–4 with tags 0x08, 0x10, 0x18, 0x20; a
// length-delimited header 0x2a holding key 0x0a and value 0x12).
func TestFrameGolden(t *testing.T) {
	t.Parallel()
	f := feishu.Frame{SeqID: 1, LogID: 300, Service: 7, Method: feishu.FrameControl,
		Headers: []feishu.FrameHeader{{Key: "type", Value: "ping"}}}
	want := "0801" + "10ac02" + "1807" + "2000" + "2a0c" + "0a0474797065" + "120470696e67"
	require.Equal(t, want, hex.EncodeToString(feishu.MarshalFrame(f)))

	got, err := feishu.UnmarshalFrame(feishu.MarshalFrame(f))
	require.NoError(t, err)
	require.Equal(t, f, got)
	require.Equal(t, "ping", got.Header(feishu.HeaderType))
	require.Empty(t, got.Header("absent"))
}

// TestFrameInterop: the adapter reads what the fake (which writes every
// optional string, as the SDKs' generated code does) encodes, and the
// other way round.
func TestFrameInterop(t *testing.T) {
	t.Parallel()
	ff := feishutest.Frame{SeqID: 1 << 40, LogID: 9, Service: 33554678, Method: 1,
		Headers: []feishutest.FrameHeader{{Key: "type", Value: "event"}, {Key: "message_id", Value: "m-1"}, {Key: "sum", Value: "1"}, {Key: "seq", Value: "0"}},
		Payload: []byte(`{"schema":"2.0"}`)}
	got, err := feishu.UnmarshalFrame(feishutest.EncodeFrame(ff))
	require.NoError(t, err)
	require.Equal(t, uint64(1<<40), got.SeqID)
	require.Equal(t, int32(33554678), got.Service)
	require.Equal(t, feishu.FrameData, got.Method)
	require.Equal(t, "m-1", got.Header(feishu.HeaderMessageID))
	require.Equal(t, ff.Payload, got.Payload)

	back, err := feishutest.DecodeFrame(feishu.MarshalFrame(got))
	require.NoError(t, err)
	require.Equal(t, ff.SeqID, back.SeqID)
	require.Equal(t, ff.Payload, back.Payload)
	require.Equal(t, "event", back.Header("type"))

	neg := feishu.Frame{SeqID: 1, LogID: 1, Service: -5, Method: 1}
	got, err = feishu.UnmarshalFrame(feishu.MarshalFrame(neg))
	require.NoError(t, err)
	require.Equal(t, int32(-5), got.Service, "a negative int32 is sign-extended to ten bytes and read back")
}

func TestUnmarshalFrameRejectsMalformed(t *testing.T) {
	t.Parallel()
	good := feishu.MarshalFrame(feishu.Frame{SeqID: 1, LogID: 2, Service: 3, Method: 1,
		Headers: []feishu.FrameHeader{{Key: "k", Value: "v"}}, Payload: []byte("p")})
	tests := map[string][]byte{
		"empty":                   {},
		"truncated":               good[:len(good)-1],
		"truncated varint":        {0x08, 0x80},
		"varint over 64 bits":     {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		"field zero":              {0x00, 0x01},
		"missing method":          mustHex(t, "080110021803"),
		"wrong wire type for seq": mustHex(t, "0a0101"+"1002"+"1803"+"2001"),
		"wrong wire type for hdr": mustHex(t, "0801"+"1002"+"1803"+"2001"+"2801"),
		"length past the end":     mustHex(t, "0801"+"1002"+"1803"+"2001"+"42ff01"),
		"header without value":    mustHex(t, "0801"+"1002"+"1803"+"2001"+"2a03"+"0a016b"),
		"header not UTF-8":        mustHex(t, "0801"+"1002"+"1803"+"2001"+"2a06"+"0a01ff"+"120176"),
		"group wire type":         mustHex(t, "0801"+"1002"+"1803"+"2001"+"53"),
	}
	for name, data := range tests {
		_, err := feishu.UnmarshalFrame(data)
		require.ErrorIs(t, err, feishu.ErrFrame, name)
	}
	// Unknown fields of every wire type are skipped.
	withUnknown := append(append([]byte{}, good...), mustHex(t, "5801"+"6101020304050607086a0161"+"6d01020304")...)
	f, err := feishu.UnmarshalFrame(withUnknown)
	require.NoError(t, err)
	require.Equal(t, []byte("p"), f.Payload)
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}
