package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var table = Table{
	0:  {Min: 3, Max: 9},
	3:  {Min: 0, Max: 9},
	18: {Min: 0, Max: 3},
}

// frame encodes a request the way a client does: header v1 or v2, then body.
func frame(req kmsg.Request, correlation int32, clientID string) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(correlation))
	if req.Key() != int16(kmsg.ControlledShutdown) || req.GetVersion() != 0 { // header v0 has no client id
		b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
		b = append(b, clientID...)
	}
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}

func TestDecodeRoundTrip(t *testing.T) {
	for _, v := range []int16{0, 4, 9} {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(v)
		name := "topic-a"
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = &name
		req.Topics = append(req.Topics, mt)
		h, got, err := table.Decode(frame(req, 42, "cli"))
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		md := got.(*kmsg.MetadataRequest)
		if h.CorrelationID != 42 || *h.ClientID != "cli" || h.Version != v || len(md.Topics) != 1 || *md.Topics[0].Topic != name {
			t.Fatalf("v%d: decoded %+v %+v", v, h, md)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(2) // below the table's minimum
	if _, _, err := table.Decode(frame(req, 1, "c")); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("produce v2: err = %v", err)
	}
	unknown := []byte{0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff}
	if _, _, err := table.Decode(unknown); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown key: err = %v", err)
	}
	good := frame(kmsg.NewPtrMetadataRequest(), 1, "c")
	if _, _, err := table.Decode(good[:len(good)-1]); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated body: err = %v", err)
	}
	if _, _, err := table.Decode([]byte{1, 2, 3}); !errors.Is(err, ErrMalformed) {
		t.Errorf("short frame: err = %v", err)
	}
}

// ControlledShutdown v0 has Kafka's request header v0: no client id.
func TestDecodeControlledShutdownV0(t *testing.T) {
	tab := Table{7: {Min: 0, Max: 3}}
	req := kmsg.NewPtrControlledShutdownRequest()
	req.BrokerID = 3
	h, got, err := tab.Decode(frame(req, 5, "ignored"))
	if err != nil {
		t.Fatal(err)
	}
	if h.ClientID != nil || h.CorrelationID != 5 || got.(*kmsg.ControlledShutdownRequest).BrokerID != 3 {
		t.Fatalf("decoded %+v %+v", h, got)
	}
	req.SetVersion(1)
	if _, got, err := tab.Decode(frame(req, 6, "c")); err != nil || got.(*kmsg.ControlledShutdownRequest).BrokerID != 3 {
		t.Fatalf("v1: %v %+v", err, got)
	}
}

func TestReadFrameLimit(t *testing.T) {
	var buf bytes.Buffer
	binary.Write(&buf, binary.BigEndian, int32(1<<30))
	if _, err := ReadFrame(&buf, 1<<20, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	buf.Reset()
	binary.Write(&buf, binary.BigEndian, int32(3))
	buf.Write([]byte{1, 2, 3})
	f, err := ReadFrame(&buf, 10, nil)
	if err != nil || !bytes.Equal(f, []byte{1, 2, 3}) {
		t.Fatalf("frame %v, err %v", f, err)
	}
}

func TestApiVersionsFallback(t *testing.T) {
	resp := table.ApiVersions(7)
	if resp.GetVersion() != 0 || resp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("v7: version %d error %d; want v0 UNSUPPORTED_VERSION", resp.GetVersion(), resp.ErrorCode)
	}
	// Kafka 2.4+ (KIP-511) lists only ApiVersions itself with the error.
	if len(resp.ApiKeys) != 1 || resp.ApiKeys[0].ApiKey != 18 || resp.ApiKeys[0].MaxVersion != 3 {
		t.Fatalf("keys %+v", resp.ApiKeys)
	}
	// The response header of ApiVersions never carries tags.
	out := AppendResponse(nil, Header{Key: ApiVersionsKey, CorrelationID: 9}, table.ApiVersions(3))
	var back kmsg.ApiVersionsResponse
	back.SetVersion(3)
	if err := back.ReadFrom(out[8:]); err != nil || len(back.ApiKeys) != 3 {
		t.Fatalf("re-read: %v %+v", err, back)
	}
	if binary.BigEndian.Uint32(out) != uint32(len(out)-4) {
		t.Fatal("size prefix wrong")
	}
}

// FuzzDecode: no input makes the decoder panic, and whatever decodes
// re-encodes to a request that decodes again.
func FuzzDecode(f *testing.F) {
	f.Add(frame(kmsg.NewPtrMetadataRequest(), 1, "c"))
	p := kmsg.NewPtrProduceRequest()
	p.SetVersion(9)
	f.Add(frame(p, 2, "c"))
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	f.Add(frame(av, 3, "c"))
	f.Add(frame(kmsg.NewPtrControlledShutdownRequest(), 4, ""))
	full := Table{}
	for k := int16(0); k < 100; k++ {
		if r := kmsg.RequestForKey(k); r != nil {
			full[k] = VersionRange{0, r.MaxVersion()}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, req, err := full.Decode(data)
		if err != nil {
			return
		}
		cid := ""
		if h.ClientID != nil {
			cid = *h.ClientID
		}
		if _, _, err := full.Decode(frame(req, h.CorrelationID, cid)); err != nil {
			t.Fatalf("re-encoded %s v%d does not decode: %v", kmsg.NameForKey(h.Key), h.Version, err)
		}
	})
}

// FuzzReadFrame: frames never allocate past the limit or panic.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, 1, 2})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := ReadFrame(bytes.NewReader(data), 1<<16, nil)
		if err == nil && len(fr) > 1<<16 {
			t.Fatalf("frame of %d bytes over the limit", len(fr))
		}
	})
}
