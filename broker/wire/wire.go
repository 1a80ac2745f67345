// Package wire frames and decodes Kafka protocol requests and encodes
// responses, with franz-go's kmsg doing every body. It owns the broker's
// version table: ApiVersions is answered from it and every request is
// checked against it.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/internal/reqheader"
)

// VersionRange is the inclusive range of versions the broker serves for one API.
type VersionRange struct{ Min, Max int16 }

// Table maps API keys to the versions the broker serves.
type Table map[int16]VersionRange

// Errors returned while reading requests.
var (
	// ErrFrameTooLarge: the size prefix exceeds socket.request.max.bytes.
	ErrFrameTooLarge = errors.New("request frame too large")
	// ErrMalformed: the header or body does not parse.
	ErrMalformed = errors.New("malformed request")
	// ErrUnknownKey: no API has this key.
	ErrUnknownKey = errors.New("unknown API key")
	// ErrUnsupportedVersion: the API is known but not at this version.
	ErrUnsupportedVersion = errors.New("unsupported API version")
)

// ApiVersionsKey is the key of ApiVersions, whose response header never has tags.
const ApiVersionsKey = 18

// Header is a decoded request header.
type Header = reqheader.Header

// ReadFrame reads one size-prefixed frame from r into buf (grown as needed)
// and returns it. A size over max is rejected before anything is allocated.
func ReadFrame(r io.Reader, max int32, buf []byte) ([]byte, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	if n < 0 || n > max {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	if int(n) > cap(buf) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// ParseHeader reads the request header fields that every version shares
// (key, version, correlation id). It never fails on a frame of 8+ bytes.
func ParseHeader(frame []byte) (Header, error) {
	if len(frame) < 8 {
		return Header{}, fmt.Errorf("%w: %d-byte frame", ErrMalformed, len(frame))
	}
	return reqheader.Fixed(frame)
}

// Decode parses a whole request frame. The header is returned even when
// the body cannot be served, so the caller can answer with the right
// correlation id. The returned request may alias frame.
func (t Table) Decode(frame []byte) (Header, kmsg.Request, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return h, nil, err
	}
	req := kmsg.RequestForKey(h.Key)
	if req == nil {
		return h, nil, fmt.Errorf("%w %d", ErrUnknownKey, h.Key)
	}
	vr, ok := t[h.Key]
	if !ok || h.Version < vr.Min || h.Version > vr.Max || h.Version > req.MaxVersion() {
		return h, nil, fmt.Errorf("%w: %s v%d", ErrUnsupportedVersion, kmsg.NameForKey(h.Key), h.Version)
	}
	req.SetVersion(h.Version)
	body, err := reqheader.Rest(&h, frame, req.IsFlexible())
	if err != nil {
		return h, nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	if err := readBody(req, body); err != nil {
		return h, nil, fmt.Errorf("%w: %s v%d: %v", ErrMalformed, kmsg.NameForKey(h.Key), h.Version, err)
	}
	return h, req, nil
}

// readBody decodes without letting a decoder panic escape: bad input must
// never take the broker down.
func readBody(req kmsg.Request, body []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decode panic: %v", r)
		}
	}()
	return req.ReadFrom(body)
}

// AppendResponse appends a size-prefixed response frame for a request with
// header h to dst. ApiVersions always uses response header v0 (KIP-511).
func AppendResponse(dst []byte, h Header, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.CorrelationID))
	if resp.IsFlexible() && h.Key != ApiVersionsKey {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// ApiVersions answers an ApiVersions request from the table. A request at
// a version above the table's is answered at v0 with UNSUPPORTED_VERSION and
// only the ApiVersions entry, so the client can retry at a version it
// shares (KIP-511; Kafka's ApiVersionsRequest.getErrorResponse).
func (t Table) ApiVersions(version int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(version)
	if vr := t[ApiVersionsKey]; version > vr.Max {
		resp.SetVersion(0)
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = ApiVersionsKey, vr.Min, vr.Max
		resp.ApiKeys = append(resp.ApiKeys, k)
		return resp
	}
	for _, key := range t.keys() {
		vr := t[key]
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, vr.Min, vr.Max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}

func (t Table) keys() []int16 {
	keys := make([]int16, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}
