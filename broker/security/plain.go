package security

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"strings"
	"unicode"
)

// plainServer is the server side of PLAIN (RFC 4616): one message,
// authzid NUL authcid NUL password.
type plainServer struct {
	users map[string]string
	user  string
}

func (p *plainServer) principal() string { return p.user }

// errPlainRefused is PlainSaslServer's wording for every wrong user or
// password.
var errPlainRefused = authFailed("Authentication failed: Invalid username or password")

func (p *plainServer) next(in []byte) ([]byte, bool, error) {
	parts := bytes.Split(in, []byte{0})
	if len(parts) != 3 {
		return nil, false, authFailed("Invalid SASL/PLAIN response: expected 3 tokens, got " + fmt.Sprint(len(parts)))
	}
	authzid, user, pass := string(parts[0]), string(parts[1]), parts[2]
	switch {
	case user == "":
		return nil, false, authFailed("Authentication failed: username not specified")
	case len(pass) == 0:
		return nil, false, authFailed("Authentication failed: password not specified")
	case authzid != "" && authzid != user:
		return nil, false, authFailed("Authentication failed: Client requested an authorization id that is different from username")
	}
	want, ok := p.users[user]
	if !ok {
		// Compare anyway, so a wrong user costs what a wrong password does.
		want = "\x00"
	}
	if subtle.ConstantTimeCompare([]byte(want), pass) != 1 || !ok {
		return nil, false, errPlainRefused
	}
	p.user = user
	return []byte{}, true, nil
}

// authFailed is a refusal whose text the client may see (Kafka's
// SaslAuthenticationException).
type authFailed string

func (e authFailed) Error() string { return string(e) }

// JAAS is what isrlab reads of a sasl.jaas.config line:
// <LoginModule> required username="u" password="p" user_<name>="<pw>" ...;
type JAAS struct {
	Module             string
	Username, Password string            // the broker's own credentials, for inter-broker connections
	Users              map[string]string // PlainLoginModule's user_<name> entries
}

// ParseJAAS reads one JAAS login module line. Errors never quote values.
func ParseJAAS(s string) (JAAS, error) {
	j := JAAS{Users: map[string]string{}}
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(s, ";")
	i := strings.IndexFunc(s, unicode.IsSpace)
	if i < 0 {
		return j, fmt.Errorf("sasl.jaas.config: expected '<LoginModule> required key=\"value\" ...;'")
	}
	j.Module, s = s[:i], strings.TrimSpace(s[i:])
	flag, rest, _ := strings.Cut(s, " ")
	switch flag {
	case "required", "requisite", "sufficient", "optional":
	default:
		return j, fmt.Errorf("sasl.jaas.config: expected a control flag (required) after %s", j.Module)
	}
	s = strings.TrimSpace(rest)
	for s != "" {
		k, v, ok := strings.Cut(s, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return j, fmt.Errorf("sasl.jaas.config: expected key=\"value\" options")
		}
		v = strings.TrimLeftFunc(v, unicode.IsSpace)
		var val string
		if strings.HasPrefix(v, `"`) {
			end := strings.Index(v[1:], `"`)
			if end < 0 {
				return j, fmt.Errorf("sasl.jaas.config: option %s has no closing quote", k)
			}
			val, s = v[1:1+end], v[2+end:]
		} else {
			end := strings.IndexFunc(v, unicode.IsSpace)
			if end < 0 {
				end = len(v)
			}
			val, s = v[:end], v[end:]
		}
		s = strings.TrimSpace(s)
		switch {
		case k == "username":
			j.Username = val
		case k == "password":
			j.Password = val
		case strings.HasPrefix(k, "user_"):
			j.Users[strings.TrimPrefix(k, "user_")] = val
		}
	}
	return j, nil
}
