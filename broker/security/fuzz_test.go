package security

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// noUsers knows no SCRAM credential.
type noUsers struct{}

func (noUsers) ScramCredential(context.Context, string, string) (ScramCredential, bool, error) {
	return ScramCredential{}, false, nil
}

func saslFrame(req kmsg.Request, corr int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	id := "f"
	b = kbin.AppendNullableString(b, &id)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}

// FuzzSASLFrames feeds a connection's SASL session a series of frames
// (separated by 0xff 0x00 0xff in the input): requests decoded as the
// broker decodes them, or raw tokens after a SaslHandshake v0. With no
// user known, no input may panic or authenticate the connection.
func FuzzSASLFrames(f *testing.F) {
	hs := func(v int16, mech string) []byte {
		r := kmsg.NewPtrSASLHandshakeRequest()
		r.SetVersion(v)
		r.Mechanism = mech
		return saslFrame(r, 1)
	}
	auth := func(v int16, tok string) []byte {
		r := kmsg.NewPtrSASLAuthenticateRequest()
		r.SetVersion(v)
		r.SASLAuthBytes = []byte(tok)
		return saslFrame(r, 2)
	}
	sep := []byte{0xff, 0x00, 0xff}
	join := func(fs ...[]byte) []byte { return bytes.Join(fs, sep) }
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	f.Add(join(saslFrame(av, 0), hs(1, "PLAIN"), auth(2, "\x00alice\x00pw")))
	f.Add(join(hs(1, "SCRAM-SHA-256"), auth(1, "n,,n=alice,r=abc"), auth(1, "c=biws,r=abc,p=AAAA")))
	f.Add(join(hs(0, "SCRAM-SHA-512"), []byte("n,,n=alice,r=abc"), []byte("c=biws,r=abcx,p=AAAA")))
	f.Add(join(hs(1, "PLAIN"), saslFrame(kmsg.NewPtrMetadataRequest(), 3)))
	table := wire.Table{18: {Min: 0, Max: 3}, 17: {Min: 0, Max: 1}, 36: {Min: 0, Max: 2}, 3: {Min: 0, Max: 12}}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := NewSASLConfig(&SASLConfig{Mechanisms: []string{Plain, ScramSHA256, ScramSHA512}, PlainUsers: map[string]string{}, Scram: noUsers{}})
		s := NewSession(cfg)
		av := func() kmsg.Response { return kmsg.NewPtrApiVersionsResponse() }
		for _, fr := range bytes.Split(data, sep) {
			if s.Raw() {
				if _, closeConn, _ := s.RawStep(fr); closeConn {
					break
				}
			} else {
				h, req, err := table.Decode(fr)
				if err != nil {
					break
				}
				r, taken := s.Step(context.Background(), h.Key, h.Version, req, av)
				if !taken {
					t.Fatalf("a %s request passed an unauthenticated session", kmsg.NameForKey(h.Key))
				}
				if r.Close {
					break
				}
			}
			if s.Authenticated() {
				t.Fatalf("authenticated with no user known (mechanism %s)", s.mech)
			}
		}
	})
}
