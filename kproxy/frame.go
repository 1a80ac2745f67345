package kproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/internal/reqheader"
)

// MaxFrame is the largest frame the proxy forwards (size prefix excluded);
// a larger one closes its connection pair.
const MaxFrame = 100 << 20

// reqHeader is a parsed request header.
type reqHeader struct {
	Key, Version int16
	Corr         int32
	ClientID     *string
	// Known is whether kmsg knows Key; only then are Flexible and
	// BodyOff meaningful beyond the correlation id.
	Known    bool
	Flexible bool
	// BodyOff is where the body starts in the frame (size excluded).
	BodyOff int
}

// requestHeaderFlexible reports whether key at version uses request
// header v2 (and response header v1, except for ApiVersions).
func flexible(key, version int16) (flex, known bool) {
	r := kmsg.RequestForKey(key)
	if r == nil {
		return false, false
	}
	r.SetVersion(version)
	return r.IsFlexible(), true
}

// parseRequestHeader parses the header of a request frame (size prefix
// excluded).
func parseRequestHeader(frame []byte) (reqHeader, error) {
	var h reqHeader
	f, err := reqheader.Fixed(frame)
	if err != nil {
		return h, fmt.Errorf("request of %d bytes: too short for a header", len(frame))
	}
	h.Key, h.Version, h.Corr, h.BodyOff = f.Key, f.Version, f.CorrelationID, 8
	if h.Key < 0 || h.Version < 0 {
		return h, fmt.Errorf("request key %d version %d: negative", h.Key, h.Version)
	}
	h.Flexible, h.Known = flexible(h.Key, h.Version)
	if !h.Known {
		return h, nil
	}
	body, err := reqheader.Rest(&f, frame, h.Flexible)
	if err != nil {
		return h, fmt.Errorf("request %s v%d: %w", kmsg.NameForKey(h.Key), h.Version, err)
	}
	h.ClientID, h.BodyOff = f.ClientID, len(frame)-len(body)
	return h, nil
}

// produceInfo is what the proxy reads of a Produce body without kmsg.
type produceInfo struct {
	TransactionalID *string
	Acks            int16
}

// parseProduce reads the transactional id (v3+) and acks of a Produce
// request body.
func parseProduce(version int16, body []byte) (produceInfo, error) {
	var p produceInfo
	r := kbin.Reader{Src: body}
	if version >= 3 {
		if version >= 9 {
			p.TransactionalID = r.CompactNullableString()
		} else {
			p.TransactionalID = r.NullableString()
		}
	}
	p.Acks = r.Int16()
	if !r.Ok() {
		return p, errors.New("produce request: truncated before acks")
	}
	return p, nil
}

// responseHeaderLen is the length of a response header (correlation id and,
// for flexible versions but ApiVersions, tagged fields), or an error.
func responseHeaderLen(frame []byte, key int16, flex bool) (int, error) {
	if len(frame) < 4 {
		return 0, fmt.Errorf("response of %d bytes: too short for a correlation id", len(frame))
	}
	if !flex || key == int16(kmsg.ApiVersions) {
		return 4, nil
	}
	r := kbin.Reader{Src: frame[4:]}
	kmsg.SkipTags(&r)
	if !r.Ok() {
		return 0, errors.New("response header: truncated tagged fields")
	}
	return len(frame) - len(r.Src), nil
}

// rewriteErrors returns the response frame (size prefix excluded) with
// every ErrorCode field of its body set to code, the header kept as is.
func rewriteErrors(frame []byte, key, version int16, code int16) ([]byte, error) {
	flex, known := flexible(key, version)
	if !known {
		return nil, fmt.Errorf("api key %d unknown", key)
	}
	hl, err := responseHeaderLen(frame, key, flex)
	if err != nil {
		return nil, err
	}
	resp := kmsg.ResponseForKey(key)
	resp.SetVersion(version)
	if err := resp.ReadFrom(frame[hl:]); err != nil {
		return nil, fmt.Errorf("decode %s v%d response: %w", kmsg.NameForKey(key), version, err)
	}
	setErrorCodes(reflect.ValueOf(resp), code)
	out := append([]byte(nil), frame[:hl]...)
	return resp.AppendTo(out), nil
}

// produceErrorResponse is the Produce response (size prefix excluded) that
// answers the Produce request body of version with code on every
// partition it names.
func produceErrorResponse(corr int32, version int16, body []byte, code int16) ([]byte, error) {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decode produce v%d request: %w", version, err)
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	resp.SetVersion(version)
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = code
			rp.BaseOffset = -1
			rp.LogAppendTime = -1
			rp.LogStartOffset = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(corr))
	if req.IsFlexible() {
		out = append(out, 0) // no tagged fields
	}
	return resp.AppendTo(out), nil
}

// withSize prefixes a frame with its size.
func withSize(frame []byte) []byte {
	out := make([]byte, 4, 4+len(frame))
	binary.BigEndian.PutUint32(out, uint32(len(frame)))
	return append(out, frame...)
}
