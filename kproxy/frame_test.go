package kproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// appendRequest writes a request frame (size prefix included) as a client
// does: kmsg's RequestFormatter, and header v0 for ControlledShutdown v0.
func appendRequest(r kmsg.Request, corr int32, clientID string) []byte {
	if r.Key() == int16(kmsg.ControlledShutdown) && r.GetVersion() == 0 {
		b := binary.BigEndian.AppendUint16(nil, uint16(r.Key()))
		b = binary.BigEndian.AppendUint16(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(corr))
		return withSize(r.AppendTo(b))
	}
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID)).AppendRequest(nil, r, corr)
}

// appendResponse writes a response frame (size prefix included) as a
// broker does.
func appendResponse(r kmsg.Response, corr int32) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(corr))
	if r.IsFlexible() && r.Key() != int16(kmsg.ApiVersions) {
		b = append(b, 0)
	}
	return withSize(r.AppendTo(b))
}

func TestParseRequestHeaderEveryAPIAndVersion(t *testing.T) {
	n := 0
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		if kmsg.RequestForKey(key) == nil {
			continue
		}
		for v := int16(0); v <= kmsg.RequestForKey(key).MaxVersion(); v++ {
			r := kmsg.RequestForKey(key)
			r.SetVersion(v)
			txn := "txn-1"
			if p, ok := r.(*kmsg.ProduceRequest); ok {
				p.Acks = -1
				if v >= 3 {
					p.TransactionID = &txn
				}
				p.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 3}}}}
			}
			corr := int32(key)*1000 + int32(v)
			raw := appendRequest(r, corr, "client-a")
			if got := binary.BigEndian.Uint32(raw); int(got) != len(raw)-4 {
				t.Fatalf("%s v%d: test frame size %d for %d bytes", kmsg.NameForKey(key), v, got, len(raw)-4)
			}
			h, err := parseRequestHeader(raw[4:])
			name := kmsg.NameForKey(key)
			if err != nil {
				t.Fatalf("%s v%d: %v", name, v, err)
			}
			if h.Key != key || h.Version != v || h.Corr != corr || !h.Known {
				t.Fatalf("%s v%d: parsed key %d version %d corr %d known %v", name, v, h.Key, h.Version, h.Corr, h.Known)
			}
			if h.Flexible != r.IsFlexible() {
				t.Fatalf("%s v%d: flexible %v, want %v", name, v, h.Flexible, r.IsFlexible())
			}
			if key == int16(kmsg.ControlledShutdown) && v == 0 {
				if h.ClientID != nil {
					t.Fatalf("%s v0: client id %q in a v0 header", name, *h.ClientID)
				}
			} else if h.ClientID == nil || *h.ClientID != "client-a" {
				t.Fatalf("%s v%d: client id %v", name, v, h.ClientID)
			}
			if body := r.AppendTo(nil); !bytes.Equal(raw[4+h.BodyOff:], body) {
				t.Fatalf("%s v%d: body at %d is not the request's body", name, v, h.BodyOff)
			}
			if key == int16(kmsg.Produce) {
				pi, err := parseProduce(v, raw[4+h.BodyOff:])
				if err != nil {
					t.Fatalf("produce v%d: %v", v, err)
				}
				if pi.Acks != -1 {
					t.Fatalf("produce v%d: acks %d", v, pi.Acks)
				}
				if v >= 3 && (pi.TransactionalID == nil || *pi.TransactionalID != txn) {
					t.Fatalf("produce v%d: transactional id %v", v, pi.TransactionalID)
				}
				if v < 3 && pi.TransactionalID != nil {
					t.Fatalf("produce v%d: transactional id %q before v3", v, *pi.TransactionalID)
				}
			}
			n++
		}
	}
	if n < 300 {
		t.Fatalf("only %d api versions checked", n)
	}
}

func TestParseRequestHeaderRejectsTruncated(t *testing.T) {
	r := kmsg.NewPtrMetadataRequest()
	r.SetVersion(12)
	raw := appendRequest(r, 7, "a-long-client-id")
	for n := 0; n < 8+2+5; n++ {
		if _, err := parseRequestHeader(raw[4 : 4+n]); err == nil {
			t.Fatalf("header cut at %d bytes parsed", n)
		}
	}
	p := kmsg.NewPtrProduceRequest()
	p.SetVersion(9)
	raw = appendRequest(p, 1, "c")
	h, err := parseRequestHeader(raw[4:])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseProduce(9, raw[4+h.BodyOff:4+h.BodyOff+1]); err == nil {
		t.Fatal("produce body cut before acks parsed")
	}
}

// fill gives every slice of structs in v one element, recursively, and
// every string a value, so that a response has ErrorCode fields at every
// depth.
func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			fill(v.Elem(), depth)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if !t.Field(i).IsExported() || t.Field(i).Type == reflect.TypeOf(kmsg.Tags{}) {
				continue
			}
			fill(v.Field(i), depth)
		}
	case reflect.Slice:
		et := v.Type().Elem()
		if et.Kind() == reflect.Struct && depth < 6 && v.Len() == 0 {
			s := reflect.MakeSlice(v.Type(), 1, 1)
			fill(s.Index(0), depth+1)
			v.Set(s)
		}
	case reflect.String:
		if v.String() == "" {
			v.SetString("x")
		}
	}
}

// errorCodes lists the ErrorCode fields of v in walk order.
func errorCodes(v reflect.Value) []int16 {
	var out []int16
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Slice:
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i))
			}
		case reflect.Struct:
			t := v.Type()
			for i := 0; i < t.NumField(); i++ {
				if !t.Field(i).IsExported() {
					continue
				}
				if t.Field(i).Name == "ErrorCode" && v.Field(i).Kind() == reflect.Int16 {
					out = append(out, int16(v.Field(i).Int()))
					continue
				}
				walk(v.Field(i))
			}
		}
	}
	walk(v)
	return out
}

func decodeResponse(t *testing.T, raw []byte, key, version int16) kmsg.Response {
	t.Helper()
	frame := raw[4:]
	flex, _ := flexible(key, version)
	hl, err := responseHeaderLen(frame, key, flex)
	if err != nil {
		t.Fatal(err)
	}
	r := kmsg.ResponseForKey(key)
	r.SetVersion(version)
	if err := r.ReadFrom(frame[hl:]); err != nil {
		t.Fatalf("%s v%d: decode: %v", kmsg.NameForKey(key), version, err)
	}
	return r
}

// TestRewriteErrors: a rewritten response decodes, with every ErrorCode
// that its version carries set to the new code, the correlation id and the
// rest of the response unchanged. It runs over every version of the named
// APIs, and every version of every other API kmsg knows.
func TestRewriteErrors(t *testing.T) {
	const sentinel, code = 99, 6
	checked := map[string]int{}
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		proto := kmsg.ResponseForKey(key)
		if proto == nil {
			continue
		}
		for v := int16(0); v <= proto.MaxVersion(); v++ {
			r := kmsg.ResponseForKey(key)
			r.SetVersion(v)
			fill(reflect.ValueOf(r), 0)
			setErrorCodes(reflect.ValueOf(r), sentinel)
			raw := appendResponse(r, 4242)
			// Which ErrorCode fields this version carries: those that
			// come back as the sentinel.
			present := errorCodes(reflect.ValueOf(decodeResponse(t, raw, key, v)))
			setErrorCodes(reflect.ValueOf(r), 0)
			raw = appendResponse(r, 4242)
			out, err := rewriteErrors(raw[4:], key, v, code)
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
			if !bytes.Equal(out[:4], raw[4:8]) {
				t.Fatalf("%s v%d: correlation id changed", kmsg.NameForKey(key), v)
			}
			got := decodeResponse(t, withSize(out), key, v)
			codes := errorCodes(reflect.ValueOf(got))
			if len(codes) != len(present) {
				t.Fatalf("%s v%d: %d error codes, want %d", kmsg.NameForKey(key), v, len(codes), len(present))
			}
			n := 0
			for i, c := range codes {
				switch {
				case present[i] == sentinel && c != code:
					t.Fatalf("%s v%d: error code #%d is %d, want %d", kmsg.NameForKey(key), v, i, c, code)
				case present[i] == sentinel:
					n++
				}
			}
			// Apart from the codes, the response is the same.
			setErrorCodes(reflect.ValueOf(got), 0)
			if again := appendResponse(got, 4242); !bytes.Equal(again, raw) {
				t.Fatalf("%s v%d: rewriting changed more than error codes", kmsg.NameForKey(key), v)
			}
			if n > 0 {
				checked[kmsg.NameForKey(key)]++
			}
		}
	}
	for _, name := range []string{"Produce", "Fetch", "EndTxn", "InitProducerID", "Metadata", "AddPartitionsToTxn", "TxnOffsetCommit"} {
		k, _ := ParseAPI(name)
		if want := int(kmsg.ResponseForKey(k).MaxVersion()) + 1; checked[name] < want-1 {
			t.Errorf("%s: error codes rewritten in %d versions only", name, checked[name])
		}
	}
}

func TestProduceErrorResponse(t *testing.T) {
	for v := int16(0); v <= kmsg.NewPtrProduceRequest().MaxVersion(); v++ {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(v)
		req.Acks = -1
		for _, topic := range []string{"a", "b"} {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = topic
			rt.TopicID = [16]byte{1, byte(len(topic))}
			for p := int32(0); p < 3; p++ {
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Partition = p
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		raw := appendRequest(req, 77, "c")
		h, err := parseRequestHeader(raw[4:])
		if err != nil {
			t.Fatal(err)
		}
		out, err := produceErrorResponse(h.Corr, v, raw[4+h.BodyOff:], 6)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if corr := int32(binary.BigEndian.Uint32(out)); corr != 77 {
			t.Fatalf("v%d: correlation id %d", v, corr)
		}
		resp := decodeResponse(t, withSize(out), 0, v).(*kmsg.ProduceResponse)
		if len(resp.Topics) != 2 {
			t.Fatalf("v%d: %d topics", v, len(resp.Topics))
		}
		for i, rt := range resp.Topics {
			if v < 13 && rt.Topic != req.Topics[i].Topic || v >= 13 && rt.TopicID != req.Topics[i].TopicID {
				t.Fatalf("v%d: topic %q %v, want %q", v, rt.Topic, rt.TopicID, req.Topics[i].Topic)
			}
			if len(rt.Partitions) != 3 {
				t.Fatalf("v%d: %d partitions", v, len(rt.Partitions))
			}
			for j, rp := range rt.Partitions {
				if rp.Partition != int32(j) || rp.ErrorCode != 6 || rp.BaseOffset != -1 {
					t.Fatalf("v%d: partition %+v", v, rp)
				}
			}
		}
	}
}

func TestReadFrameLimits(t *testing.T) {
	for _, size := range []uint32{MaxFrame + 1, 1 << 31, 0xffffffff} {
		hdr := binary.BigEndian.AppendUint32(nil, size)
		if _, err := readFrame(bytes.NewReader(append(hdr, 1, 2, 3))); !errors.Is(err, errFrameSize) {
			t.Errorf("size %d: %v", size, err)
		}
	}
	raw := withSize([]byte("abc"))
	got, err := readFrame(bytes.NewReader(raw))
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("readFrame = %q, %v", got, err)
	}
	if _, err := readFrame(bytes.NewReader(raw[:5])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v", err)
	}
}
