// Package reqheader reads the header of a Kafka request frame, every
// version of it: the broker's wire decoder and the lab's Kafka proxy read
// headers the same way through it.
package reqheader

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Header is a request header.
type Header struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      *string
}

// ErrTruncated: the frame ends inside the header.
var ErrTruncated = errors.New("truncated request header")

// controlledShutdownKey is the key of ControlledShutdown, whose v0 request
// header has no client id (Kafka's request header v0).
const controlledShutdownKey = 7

// Fixed reads the fields every header version shares: key, version and
// correlation id, the first 8 bytes of the frame (size prefix excluded).
func Fixed(frame []byte) (Header, error) {
	if len(frame) < 8 {
		return Header{}, fmt.Errorf("%w: %d-byte frame", ErrTruncated, len(frame))
	}
	return Header{
		Key:           int16(binary.BigEndian.Uint16(frame[0:])),
		Version:       int16(binary.BigEndian.Uint16(frame[2:])),
		CorrelationID: int32(binary.BigEndian.Uint32(frame[4:])),
	}, nil
}

// Rest reads the rest of h's header from frame, for an API whose version
// is flexible or not: the client id (header v1 and v2; ControlledShutdown
// v0 has header v0) and, for a flexible version, the tagged fields (header
// v2). It returns the body that follows.
func Rest(h *Header, frame []byte, flexible bool) ([]byte, error) {
	b := kbin.Reader{Src: frame[8:]}
	if h.Key != controlledShutdownKey || h.Version != 0 {
		h.ClientID = b.NullableString()
	}
	if flexible {
		kmsg.SkipTags(&b)
	}
	if err := b.Complete(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTruncated, err)
	}
	return b.Src, nil
}
