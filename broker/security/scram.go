package security

import (
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// SCRAM mechanism names.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	Plain       = "PLAIN"
)

// Kafka's bounds on SCRAM iterations (ScramMechanism.minIterations, and
// the 16384 AlterUserScramCredentials accepts at most).
const (
	MinScramIterations = 4096
	MaxScramIterations = 16384
)

// ErrUnknownMechanism is a mechanism that is not SCRAM-SHA-256 or -512.
var ErrUnknownMechanism = errors.New("unknown SCRAM mechanism")

func scramHash(mechanism string) (func() hash.Hash, error) {
	switch mechanism {
	case ScramSHA256:
		return sha256.New, nil
	case ScramSHA512:
		return sha512.New, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownMechanism, mechanism)
}

// ScramCredential is what the server keeps of a SCRAM password (RFC 5802
// section 3), as Kafka stores it in /config/users/<user>.
type ScramCredential struct {
	Salt, StoredKey, ServerKey []byte
	Iterations                 int
}

// String is Kafka's stored form:
// salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>.
func (c ScramCredential) String() string {
	e := base64.StdEncoding.EncodeToString
	return "salt=" + e(c.Salt) + ",stored_key=" + e(c.StoredKey) + ",server_key=" + e(c.ServerKey) + ",iterations=" + strconv.Itoa(c.Iterations)
}

// ParseScramCredential reads the stored form String writes.
func ParseScramCredential(s string) (ScramCredential, error) {
	var c ScramCredential
	for _, f := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return c, errors.New("malformed SCRAM credential")
		}
		var err error
		switch k {
		case "salt":
			c.Salt, err = base64.StdEncoding.DecodeString(v)
		case "stored_key":
			c.StoredKey, err = base64.StdEncoding.DecodeString(v)
		case "server_key":
			c.ServerKey, err = base64.StdEncoding.DecodeString(v)
		case "iterations":
			c.Iterations, err = strconv.Atoi(v)
		}
		if err != nil {
			return c, fmt.Errorf("malformed SCRAM credential field %s", k)
		}
	}
	if len(c.Salt) == 0 || len(c.StoredKey) == 0 || len(c.ServerKey) == 0 || c.Iterations <= 0 {
		return c, errors.New("malformed SCRAM credential: a field is missing")
	}
	return c, nil
}

// SaltedPassword is RFC 5802's Hi(Normalize(password), salt, i).
func SaltedPassword(mechanism, password string, salt []byte, iterations int) ([]byte, error) {
	h, err := scramHash(mechanism)
	if err != nil {
		return nil, err
	}
	return pbkdf2.Key(h, password, salt, iterations, h().Size())
}

// CredentialFromSalted derives the stored credential from a salted
// password (what AlterUserScramCredentials carries).
func CredentialFromSalted(mechanism string, salt, salted []byte, iterations int) (ScramCredential, error) {
	h, err := scramHash(mechanism)
	if err != nil {
		return ScramCredential{}, err
	}
	clientKey := hmacOf(h, salted, []byte("Client Key"))
	stored := h()
	stored.Write(clientKey)
	return ScramCredential{Salt: salt, StoredKey: stored.Sum(nil), ServerKey: hmacOf(h, salted, []byte("Server Key")), Iterations: iterations}, nil
}

// NewScramCredential makes the credential of password with a random salt.
func NewScramCredential(mechanism, password string, iterations int) (ScramCredential, error) {
	salt := make([]byte, 32)
	rand.Read(salt)
	salted, err := SaltedPassword(mechanism, password, salt, iterations)
	if err != nil {
		return ScramCredential{}, err
	}
	return CredentialFromSalted(mechanism, salt, salted, iterations)
}

func hmacOf(h func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(h, key)
	m.Write(msg)
	return m.Sum(nil)
}

// scramServer is the server side of one SCRAM exchange: client-first,
// server-first, client-final, server-final.
type scramServer struct {
	mechanism string
	h         func() hash.Hash
	lookup    func(user string) (ScramCredential, bool, error)
	fake      func(user string) ScramCredential // for unknown users
	nonce     func() string

	step            int
	user            string
	cred            ScramCredential
	known           bool
	gs2             string
	clientFirstBare string
	serverFirst     string
	nonceAll        string
}

// errBadCredentials is every refusal that depends on the user or the
// password: its text never says which was wrong.
var errBadCredentials = errors.New("invalid credentials")

// errMalformed is a message that does not follow the mechanism.
type errMalformed string

func (e errMalformed) Error() string { return "malformed SCRAM message: " + string(e) }

func (s *scramServer) principal() string { return s.user }

// next consumes one client message and returns the server's answer.
func (s *scramServer) next(in []byte) (out []byte, done bool, err error) {
	switch s.step {
	case 0:
		s.step++
		return s.clientFirst(string(in))
	case 1:
		s.step++
		return s.clientFinal(string(in))
	}
	return nil, false, errMalformed("message after the exchange ended")
}

func (s *scramServer) clientFirst(m string) ([]byte, bool, error) {
	// gs2-header: "n,," or "y,,", optionally with a=<authzid>; channel
	// binding ("p=") is not offered, as in Kafka.
	parts := strings.SplitN(m, ",", 3)
	if len(parts) != 3 || (parts[0] != "n" && parts[0] != "y") {
		return nil, false, errMalformed("bad GS2 header")
	}
	authzid := ""
	if parts[1] != "" {
		a, ok := strings.CutPrefix(parts[1], "a=")
		if !ok {
			return nil, false, errMalformed("bad authorization id")
		}
		authzid = a
	}
	s.gs2 = parts[0] + "," + parts[1] + ","
	s.clientFirstBare = parts[2]
	attrs := strings.Split(parts[2], ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") || len(attrs[1]) <= 2 {
		return nil, false, errMalformed("client-first message needs n= and r=")
	}
	user, err := saslName(attrs[0][2:])
	if err != nil {
		return nil, false, err
	}
	if authzid != "" {
		if z, err := saslName(authzid); err != nil || z != user {
			return nil, false, errBadCredentials
		}
	}
	s.user = user
	cred, known, err := s.lookup(user)
	if err != nil {
		return nil, false, err
	}
	if !known {
		// An unknown user goes through the whole exchange with a made-up
		// credential and fails where a wrong password fails, so the
		// answers do not tell the two apart.
		cred = s.fake(user)
	}
	s.cred, s.known = cred, known
	s.nonceAll = attrs[1][2:] + s.nonce()
	s.serverFirst = "r=" + s.nonceAll + ",s=" + base64.StdEncoding.EncodeToString(cred.Salt) + ",i=" + strconv.Itoa(cred.Iterations)
	return []byte(s.serverFirst), false, nil
}

func (s *scramServer) clientFinal(m string) ([]byte, bool, error) {
	i := strings.LastIndex(m, ",p=")
	if i < 0 || !strings.HasPrefix(m, "c=") {
		return nil, false, errMalformed("client-final message needs c=, r= and p=")
	}
	withoutProof := m[:i]
	proof, err := base64.StdEncoding.DecodeString(m[i+3:])
	if err != nil {
		return nil, false, errMalformed("bad proof")
	}
	// The nonce must end with the server-first message's, as Kafka's
	// ScramSaslServer checks it (not equal it): librdkafka before 2.6.1
	// sends its own nonce once more in front, and Kafka lets it in.
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[1], "r=") || !strings.HasSuffix(attrs[1], s.nonceAll) {
		return nil, false, errMalformed("nonce mismatch")
	}
	if cb, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(attrs[0], "c=")); err != nil || string(cb) != s.gs2 {
		return nil, false, errMalformed("channel binding mismatch")
	}
	authMessage := []byte(s.clientFirstBare + "," + s.serverFirst + "," + withoutProof)
	sig := hmacOf(s.h, s.cred.StoredKey, authMessage)
	if len(proof) != len(sig) {
		return nil, false, errBadCredentials
	}
	clientKey := make([]byte, len(sig))
	subtle.XORBytes(clientKey, proof, sig)
	hh := s.h()
	hh.Write(clientKey)
	if subtle.ConstantTimeCompare(hh.Sum(nil), s.cred.StoredKey) != 1 || !s.known {
		return nil, false, errBadCredentials
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacOf(s.h, s.cred.ServerKey, authMessage))), true, nil
}

// saslName decodes RFC 5802's saslname: "=2C" is ",", "=3D" is "=".
func saslName(s string) (string, error) {
	if !strings.Contains(s, "=") {
		return s, nil
	}
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", errMalformed("bad user name encoding")
		}
		i += 2
	}
	return b.String(), nil
}

// fakeCredential is a made-up credential for user, the same on every
// call with the same secret, so an unknown user's salt does not change
// between attempts.
func fakeCredential(h func() hash.Hash, secret []byte, user string) ScramCredential {
	salt := hmacOf(h, secret, []byte("salt:"+user))[:32]
	return ScramCredential{Salt: salt, StoredKey: hmacOf(h, secret, []byte("stored:"+user)), ServerKey: hmacOf(h, secret, []byte("server:"+user)), Iterations: MinScramIterations}
}
