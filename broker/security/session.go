package security

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Credentials looks up SCRAM credentials: the coordinator in a cluster
// (/config/users/<user>, as Kafka keeps them in ZooKeeper).
type Credentials interface {
	ScramCredential(ctx context.Context, mechanism, user string) (ScramCredential, bool, error)
}

// SASLConfig is one SASL listener's authentication.
type SASLConfig struct {
	Listener   string
	Mechanisms []string          // sasl.enabled.mechanisms, in order
	PlainUsers map[string]string // PLAIN's user_<name> entries
	Scram      Credentials
	// MaxReauth is connections.max.reauth.ms per mechanism; 0 (or
	// absent): sessions do not expire.
	MaxReauth map[string]time.Duration
	Now       func() time.Time
	Log       *slog.Logger
	// Reauthentications counts completed re-authentications (KIP-368).
	Reauthentications atomic.Int64
	secret            []byte
}

// Enabled reports whether mechanism m is in sasl.enabled.mechanisms.
func (c *SASLConfig) Enabled(m string) bool { return slices.Contains(c.Mechanisms, m) }

// API keys the authenticator answers.
const (
	keyApiVersions      = 18
	keySaslHandshake    = 17
	keySaslAuthenticate = 36
)

type state int

const (
	stInitial         state = iota // nothing received yet
	stHandshake                    // ApiVersions answered; SaslHandshake next
	stAuthenticate                 // handshake done; SaslAuthenticate next
	stRawAuthenticate              // handshake v0: raw tokens next
	stComplete                     // authenticated
	stFailed
)

// Session is one connection's SASL state (Kafka's SaslServerAuthenticator
// with its re-authentication info). The connection's reader calls Step
// with each decoded request, or RawStep with each frame while Raw is
// true, before anything else sees it; it is not safe for concurrent use.
type Session struct {
	cfg   *SASLConfig
	state state

	mech      string
	conv      conversation
	principal string
	expires   time.Time // zero: the session does not expire

	// Re-authentication (KIP-368): the mechanism and principal it must keep.
	reauth     bool
	prevMech   string
	prevUser   string
	badReauth  string // the refusal to send at SaslAuthenticate
	supportsV1 bool
}

type conversation interface {
	next(in []byte) (out []byte, done bool, err error)
	principal() string
}

// NewSession starts the SASL state of a new connection on a listener.
func NewSession(cfg *SASLConfig) *Session {
	if cfg.secret == nil {
		cfg.secret = make([]byte, 32)
		rand.Read(cfg.secret)
	}
	return &Session{cfg: cfg}
}

// NewSASLConfig completes a listener's SASL configuration.
func NewSASLConfig(c *SASLConfig) *SASLConfig {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	c.secret = make([]byte, 32)
	rand.Read(c.secret)
	return c
}

// Authenticated reports whether the connection may send other requests.
func (s *Session) Authenticated() bool { return s.state == stComplete }

// Principal is the authenticated user ("User:<name>" in Kafka's terms).
func (s *Session) Principal() string { return s.principal }

// Raw reports whether the next frame is a raw SASL token (after a
// SaslHandshake v0), not a Kafka request.
func (s *Session) Raw() bool { return s.state == stRawAuthenticate }

// Result is what the connection does with a request the session took:
// send Resp (when not nil), then close the connection if Close is set.
// Err, when set, says why it closes, for the broker's log.
type Result struct {
	Resp  kmsg.Response
	Close bool
	Err   error
}

// ErrSessionExpired is a request on a connection whose session ended
// (connections.max.reauth.ms) without re-authenticating.
var ErrSessionExpired = errors.New("SASL session expired; the client did not re-authenticate")

// Step handles one decoded request before the broker does. taken is
// false when the request is the broker's to answer (the connection has
// authenticated and its session has not expired).
func (s *Session) Step(ctx context.Context, key, version int16, req kmsg.Request, apiVersions func() kmsg.Response) (r Result, taken bool) {
	switch s.state {
	case stComplete:
		if key == keySaslHandshake {
			// Re-authentication starts with a handshake on the
			// authenticated connection.
			s.reauth, s.prevMech, s.prevUser = true, s.mech, s.principal
			s.state = stInitial
			return s.handshake(version, req.(*kmsg.SASLHandshakeRequest)), true
		}
		if !s.expires.IsZero() && !s.cfg.Now().Before(s.expires) {
			return Result{Close: true, Err: ErrSessionExpired}, true
		}
		return Result{}, false
	case stInitial, stHandshake:
		switch {
		case key == keyApiVersions && s.state == stInitial:
			s.state = stHandshake
			return Result{Resp: apiVersions()}, true
		case key == keySaslHandshake:
			return s.handshake(version, req.(*kmsg.SASLHandshakeRequest)), true
		}
		// Kafka closes the connection without an answer
		// (InvalidRequestException in SaslServerAuthenticator).
		return s.fail(fmt.Errorf("unexpected Kafka request of type %s during SASL handshake", kmsg.NameForKey(key))), true
	case stAuthenticate:
		if key != keySaslAuthenticate {
			err := fmt.Errorf("unexpected Kafka request of type %s during SASL authentication", kmsg.NameForKey(key))
			r := s.fail(err)
			if key == keySaslHandshake {
				hr := kmsg.NewPtrSASLHandshakeResponse()
				hr.ErrorCode, hr.SupportedMechanisms = kerr.IllegalSaslState.Code, s.cfg.Mechanisms
				r.Resp = hr
			}
			return r, true
		}
		return s.authenticate(ctx, version, req.(*kmsg.SASLAuthenticateRequest)), true
	}
	return Result{Close: true, Err: errors.New("SASL authentication failed earlier")}, true
}

func (s *Session) fail(err error) Result {
	s.state = stFailed
	return Result{Close: true, Err: err}
}

func (s *Session) handshake(version int16, req *kmsg.SASLHandshakeRequest) Result {
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.SupportedMechanisms = slices.Clone(s.cfg.Mechanisms)
	if !s.cfg.Enabled(req.Mechanism) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		r := s.fail(fmt.Errorf("unsupported SASL mechanism %q", req.Mechanism))
		r.Resp = resp
		return r
	}
	if s.reauth && req.Mechanism != s.prevMech {
		s.badReauth = fmt.Sprintf("SASL mechanism '%s' requested by client is not supported for re-authentication of mechanism '%s'", req.Mechanism, s.prevMech)
	}
	s.mech = req.Mechanism
	s.conv = s.newConversation(req.Mechanism)
	s.state = stAuthenticate
	if version == 0 {
		s.state = stRawAuthenticate
	}
	return Result{Resp: resp}
}

func (s *Session) newConversation(mech string) conversation {
	if mech == Plain {
		return &plainServer{users: s.cfg.PlainUsers}
	}
	h, _ := scramHash(mech)
	return &scramServer{
		mechanism: mech, h: h,
		lookup: func(user string) (ScramCredential, bool, error) {
			if s.cfg.Scram == nil {
				return ScramCredential{}, false, nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return s.cfg.Scram.ScramCredential(ctx, mech, user)
		},
		fake: func(user string) ScramCredential { return fakeCredential(h, s.cfg.secret, user) },
		nonce: func() string {
			b := make([]byte, 24)
			rand.Read(b)
			return base64.RawURLEncoding.EncodeToString(b)
		},
	}
}

// refusal is the text a client gets for err: a mechanism's own wording
// for PLAIN (Kafka's SaslAuthenticationException), one generic sentence
// for everything else, which never says whether the user or the password
// was wrong.
func (s *Session) refusal(err error) string {
	var af authFailed
	if errors.As(err, &af) {
		return af.Error()
	}
	what := "authentication"
	if s.reauth {
		what = "re-authentication"
	}
	return fmt.Sprintf("Authentication failed during %s due to invalid credentials with SASL mechanism %s", what, s.mech)
}

func (s *Session) authenticate(_ context.Context, version int16, req *kmsg.SASLAuthenticateRequest) Result {
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	if version >= 1 {
		s.supportsV1 = true
	}
	failWith := func(msg string, err error) Result {
		resp.ErrorCode, resp.ErrorMessage = kerr.SaslAuthenticationFailed.Code, &msg
		r := s.fail(err)
		r.Resp = resp
		return r
	}
	if s.badReauth != "" {
		return failWith(s.badReauth, errors.New(s.badReauth))
	}
	out, done, err := s.conv.next(req.SASLAuthBytes)
	if err != nil {
		return failWith(s.refusal(err), fmt.Errorf("%s: %w", s.mech, err))
	}
	resp.SASLAuthBytes = out
	if resp.SASLAuthBytes == nil {
		resp.SASLAuthBytes = []byte{}
	}
	if done {
		if r, ok := s.complete(); !ok {
			return failWith(r, errors.New(r))
		}
		resp.SessionLifetimeMillis = s.lifetime()
	}
	return Result{Resp: resp}
}

// complete ends a successful exchange; a re-authentication must keep the
// principal.
func (s *Session) complete() (string, bool) {
	user := s.conv.principal()
	if s.reauth && user != s.prevUser {
		return fmt.Sprintf("Cannot change principals during re-authentication from User:%s: User:%s", s.prevUser, user), false
	}
	if s.reauth {
		s.cfg.Reauthentications.Add(1)
	}
	s.principal, s.state = user, stComplete
	s.reauth, s.badReauth = false, ""
	s.expires = time.Time{}
	if d := s.cfg.MaxReauth[s.mech]; d > 0 {
		s.expires = s.cfg.Now().Add(d)
	}
	return "", true
}

func (s *Session) lifetime() int64 {
	if s.expires.IsZero() {
		return 0
	}
	return s.cfg.MaxReauth[s.mech].Milliseconds()
}

// RawStep handles one raw token after a SaslHandshake v0 and returns the
// raw token to send back (nil: none). A refused token closes the
// connection with nothing sent, as Kafka does for such clients.
func (s *Session) RawStep(frame []byte) (out []byte, close bool, err error) {
	out, done, err := s.conv.next(frame)
	if err != nil {
		s.state = stFailed
		return nil, true, fmt.Errorf("%s: %w", s.mech, err)
	}
	if done {
		if msg, ok := s.complete(); !ok {
			s.state = stFailed
			return nil, true, errors.New(msg)
		}
	}
	if out == nil {
		out = []byte{}
	}
	return out, false, nil
}
