package security

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/isrlab/isrlab/broker/wire"
)

// DialFunc dials a broker.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// ClientMechanism is the client side of a mechanism for user and
// password, from franz-go's implementations.
func ClientMechanism(mechanism, user, password string) (sasl.Mechanism, error) {
	switch mechanism {
	case Plain:
		return plain.Auth{User: user, Pass: password}.AsMechanism(), nil
	case ScramSHA256:
		return scram.Auth{User: user, Pass: password}.AsSha256Mechanism(), nil
	case ScramSHA512:
		return scram.Auth{User: user, Pass: password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("SASL mechanism %q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", mechanism)
}

// SecureDialer wraps dial so that each connection it returns has done
// the TLS handshake (tc not nil) and SASL authentication (mech not nil):
// the broker's own connections to other brokers' inter-broker listener.
// A connection whose SASL session has a lifetime reports Expired once it
// is near its end, and its user dials a new one instead of having the
// other broker close it mid-request.
func SecureDialer(dial DialFunc, tc *tls.Config, mech sasl.Mechanism, clientID string) DialFunc {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc != nil {
			c := tc.Clone()
			if c.ServerName == "" && !c.InsecureSkipVerify {
				host, _, _ := net.SplitHostPort(addr)
				c.ServerName = host
			}
			t := tls.Client(nc, c)
			if err := t.HandshakeContext(ctx); err != nil {
				nc.Close()
				return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
			}
			nc = t
		}
		if mech == nil {
			return nc, nil
		}
		lifetime, err := Authenticate(ctx, nc, mech, clientID, addr)
		if err != nil {
			nc.Close()
			return nil, err
		}
		ac := &authConn{Conn: nc}
		if lifetime > 0 {
			// Re-dial at 85% of the lifetime, as Kafka's clients
			// re-authenticate between 85% and 95% of it.
			ac.expires = time.Now().Add(lifetime * 85 / 100)
		}
		return ac, nil
	}
}

type authConn struct {
	net.Conn
	expires time.Time
}

// Expired reports whether the SASL session is near its end.
func (c *authConn) Expired() bool { return !c.expires.IsZero() && !time.Now().Before(c.expires) }

// AuthError is a refusal by the broker during SASL authentication.
type AuthError struct {
	Addr, Mechanism string
	Err             error
	Message         string
}

func (e *AuthError) Error() string {
	msg := fmt.Sprintf("SASL %s with %s: %v", e.Mechanism, e.Addr, e.Err)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

func (e *AuthError) Unwrap() error { return e.Err }

// Authenticate runs SaslHandshake v1 and SaslAuthenticate v1 on nc and
// returns the session lifetime the broker gave (0: none).
func Authenticate(ctx context.Context, nc net.Conn, mech sasl.Mechanism, clientID, addr string) (time.Duration, error) {
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
		defer nc.SetDeadline(time.Time{})
	}
	rd := bufio.NewReader(nc)
	corr := int32(0)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = mech.Name()
	resp, err := roundTrip(nc, rd, &corr, clientID, hs)
	if err != nil {
		return 0, fmt.Errorf("SaslHandshake with %s: %w", addr, err)
	}
	if hr := resp.(*kmsg.SASLHandshakeResponse); hr.ErrorCode != 0 {
		return 0, &AuthError{Addr: addr, Mechanism: mech.Name(), Err: kerr.ErrorForCode(hr.ErrorCode), Message: fmt.Sprintf("broker offers %v", hr.SupportedMechanisms)}
	}
	host, _, _ := net.SplitHostPort(addr)
	session, out, err := mech.Authenticate(ctx, host)
	if err != nil {
		return 0, err
	}
	for {
		ar := kmsg.NewPtrSASLAuthenticateRequest()
		ar.SetVersion(1)
		ar.SASLAuthBytes = out
		resp, err := roundTrip(nc, rd, &corr, clientID, ar)
		if err != nil {
			return 0, fmt.Errorf("SaslAuthenticate with %s: %w", addr, err)
		}
		r := resp.(*kmsg.SASLAuthenticateResponse)
		if r.ErrorCode != 0 {
			e := &AuthError{Addr: addr, Mechanism: mech.Name(), Err: kerr.ErrorForCode(r.ErrorCode)}
			if r.ErrorMessage != nil {
				e.Message = *r.ErrorMessage
			}
			return 0, e
		}
		done, next, err := session.Challenge(r.SASLAuthBytes)
		if err != nil {
			return 0, fmt.Errorf("SASL %s with %s: %w", mech.Name(), addr, err)
		}
		if done {
			return time.Duration(r.SessionLifetimeMillis) * time.Millisecond, nil
		}
		out = next
	}
}

// roundTrip sends req and reads its response (request header v1, no
// flexible SASL versions are used here).
func roundTrip(nc net.Conn, rd *bufio.Reader, corr *int32, clientID string, req kmsg.Request) (kmsg.Response, error) {
	*corr++
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(*corr))
	b = kbin.AppendNullableString(b, &clientID)
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := nc.Write(b); err != nil {
		return nil, err
	}
	frame, err := wire.ReadFrame(rd, 1<<20, nil)
	if err != nil {
		return nil, err
	}
	if len(frame) < 4 || int32(binary.BigEndian.Uint32(frame)) != *corr {
		return nil, errors.New("response correlation id mismatch")
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(frame[4:]); err != nil {
		return nil, err
	}
	return resp, nil
}
