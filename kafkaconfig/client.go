package kafkaconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// ClientSecurity is how the lab's clients connect to a cluster, with the
// client config names Kafka's clients use (librdkafka's for the PEM
// files): security.protocol, sasl.mechanism, sasl.username and
// sasl.password (or sasl.password.file, a file holding only the
// password), ssl.ca.location, and ssl.certificate.location with
// ssl.key.location for mutual TLS. The zero value is PLAINTEXT.
//
// The password never leaves this value: String, Redacted and the JSON
// and YAML forms hide it.
type ClientSecurity struct {
	Protocol     string `json:"security.protocol,omitempty" yaml:"security.protocol,omitempty"`
	Mechanism    string `json:"sasl.mechanism,omitempty" yaml:"sasl.mechanism,omitempty"`
	Username     string `json:"sasl.username,omitempty" yaml:"sasl.username,omitempty"`
	Password     Secret `json:"sasl.password,omitempty" yaml:"sasl.password,omitempty"`
	PasswordFile string `json:"sasl.password.file,omitempty" yaml:"sasl.password.file,omitempty"`
	CALocation   string `json:"ssl.ca.location,omitempty" yaml:"ssl.ca.location,omitempty"`
	CertLocation string `json:"ssl.certificate.location,omitempty" yaml:"ssl.certificate.location,omitempty"`
	KeyLocation  string `json:"ssl.key.location,omitempty" yaml:"ssl.key.location,omitempty"`
	// EndpointIdentification is ssl.endpoint.identification.algorithm:
	// "https" (the default) checks the broker's host name against its
	// certificate, "none" does not.
	EndpointIdentification string `json:"ssl.endpoint.identification.algorithm,omitempty" yaml:"ssl.endpoint.identification.algorithm,omitempty"`
	// AcceptExpired checks the broker's chain as of its certificate's
	// start, so an expired certificate is accepted: for the lab's own
	// operator connection that renews one (the cert-expiry fault's
	// heal), never for a workload. Not a Kafka client setting.
	AcceptExpired bool `json:"-" yaml:"-"`
}

// Secret is a string that prints and encodes as "[hidden]" when set.
type Secret string

const hidden = "[hidden]"

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return hidden
}

// MarshalText hides the value in JSON, YAML and text output.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret itself, for the one place that sends it.
func (s Secret) Reveal() string { return string(s) }

// Placeholder reports whether s is "[hidden]", the form a Secret is
// written in: a secret read back from a file that recorded it.
func (s Secret) Placeholder() bool { return s == hidden }

// ClientSecurityKeys are the keys ParseClientSecurity reads.
var ClientSecurityKeys = []string{"security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "sasl.password.file",
	"ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.endpoint.identification.algorithm"}

// ParseClientSecurity reads a client config's security keys (a
// --command-config properties file, a scenario's client section); other
// keys are ignored.
func ParseClientSecurity(props map[string]string) (ClientSecurity, error) {
	s := ClientSecurity{
		Protocol: props["security.protocol"], Mechanism: props["sasl.mechanism"],
		Username: props["sasl.username"], Password: Secret(props["sasl.password"]), PasswordFile: props["sasl.password.file"],
		CALocation: props["ssl.ca.location"], CertLocation: props["ssl.certificate.location"], KeyLocation: props["ssl.key.location"],
		EndpointIdentification: props["ssl.endpoint.identification.algorithm"],
	}
	return s, s.Validate()
}

// Properties is s as the client config keys ParseClientSecurity reads,
// in ClientSecurityKeys' order, the ones s sets, never an inline
// password (a file of them names sasl.password.file): a --command-config
// file of it reads back as s.
func (s ClientSecurity) Properties() []Property {
	v := map[string]string{
		"security.protocol": s.Protocol, "sasl.mechanism": s.Mechanism, "sasl.username": s.Username,
		"sasl.password.file": s.PasswordFile, "ssl.ca.location": s.CALocation, "ssl.certificate.location": s.CertLocation,
		"ssl.key.location": s.KeyLocation, "ssl.endpoint.identification.algorithm": s.EndpointIdentification,
	}
	var out []Property
	for _, k := range ClientSecurityKeys {
		if v[k] != "" {
			out = append(out, Property{Key: k, Value: v[k]})
		}
	}
	return out
}

// Summary says in one line how the config connects, for a person to
// check before a run: the protocol, the mechanism and user, where the
// password comes from (never the password) and which CAs and client
// certificate the TLS handshake uses.
func (s ClientSecurity) Summary() string {
	parts := []string{s.protocol()}
	if s.SASL() {
		pw := "password from sasl.password.file " + s.PasswordFile
		if s.PasswordFile == "" {
			pw = "password inline, " + hidden
		}
		parts = append(parts, fmt.Sprintf("%s as user %s (%s)", s.Mechanism, s.Username, pw))
	}
	if s.TLS() {
		ca := "the system's CAs"
		if s.CALocation != "" {
			ca = "the CAs in " + s.CALocation
		}
		host := "broker host names checked"
		if s.EndpointIdentification == "none" {
			host = "broker host names NOT checked"
		}
		parts = append(parts, "trusting "+ca, host)
		if s.CertLocation != "" {
			parts = append(parts, "client certificate "+s.CertLocation)
		}
	}
	return strings.Join(parts, ", ")
}

// LoadClientSecurity reads a client properties file.
func LoadClientSecurity(path string) (ClientSecurity, error) {
	f, err := os.Open(path)
	if err != nil {
		return ClientSecurity{}, fmt.Errorf("client config: %w", err)
	}
	defer f.Close()
	props, err := ParseProperties(f)
	if err != nil {
		return ClientSecurity{}, fmt.Errorf("client config %s: %w", path, err)
	}
	m := map[string]string{}
	for _, p := range props {
		m[p.Key] = p.Value
	}
	s, err := ParseClientSecurity(m)
	if err != nil {
		return s, fmt.Errorf("client config %s: %w", path, err)
	}
	return s, nil
}

func (s ClientSecurity) protocol() string {
	if s.Protocol == "" {
		return "PLAINTEXT"
	}
	return strings.ToUpper(s.Protocol)
}

// TLS reports whether connections use TLS.
func (s ClientSecurity) TLS() bool { p := s.protocol(); return p == "SSL" || p == "SASL_SSL" }

// SASL reports whether connections authenticate with SASL.
func (s ClientSecurity) SASL() bool {
	p := s.protocol()
	return p == "SASL_PLAINTEXT" || p == "SASL_SSL"
}

// Validate checks the combination of keys; errors never quote a password.
func (s ClientSecurity) Validate() error {
	bad := func(key, value, reason string) error { return &InvalidError{Key: key, Value: value, Reason: reason} }
	switch s.protocol() {
	case "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL":
	default:
		return bad("security.protocol", s.Protocol, "expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
	}
	if s.SASL() {
		switch s.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return bad("sasl.mechanism", s.Mechanism, "expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
		if s.Username == "" {
			return bad("sasl.username", "", "required with security.protocol "+s.protocol())
		}
		if (s.Password == "") == (s.PasswordFile == "") {
			return bad("sasl.password", hidden, "set exactly one of sasl.password and sasl.password.file")
		}
	}
	if (s.CertLocation == "") != (s.KeyLocation == "") {
		return bad("ssl.certificate.location", s.CertLocation, "ssl.certificate.location and ssl.key.location go together")
	}
	switch s.EndpointIdentification {
	case "", "https", "none":
	default:
		return bad("ssl.endpoint.identification.algorithm", s.EndpointIdentification, "expected https or none")
	}
	return nil
}

// TLSConfig is the client's TLS configuration; nil without TLS.
func (s ClientSecurity) TLSConfig() (*tls.Config, error) {
	if !s.TLS() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.CALocation != "" {
		b, err := os.ReadFile(s.CALocation)
		if err != nil {
			return nil, fmt.Errorf("ssl.ca.location: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("ssl.ca.location %s: no PEM certificate in it", s.CALocation)
		}
	}
	if s.CertLocation != "" {
		c, err := tls.LoadX509KeyPair(s.CertLocation, s.KeyLocation)
		if err != nil {
			return nil, fmt.Errorf("ssl.certificate.location/ssl.key.location: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	if s.EndpointIdentification == "none" {
		tc.InsecureSkipVerify = true
		tc.VerifyPeerCertificate = VerifyChain(tc.RootCAs)
	}
	if s.AcceptExpired {
		tc.InsecureSkipVerify = true
		tc.VerifyPeerCertificate = verifyChainAt(tc.RootCAs, true)
	}
	return tc, nil
}

// VerifyChain checks a peer's certificate chain against roots without
// its host name (ssl.endpoint.identification.algorithm empty or none):
// what tls.Config.VerifyPeerCertificate runs with InsecureSkipVerify.
func VerifyChain(roots *x509.CertPool) func([][]byte, [][]*x509.Certificate) error {
	return verifyChainAt(roots, false)
}

// verifyChainAt is VerifyChain; with acceptExpired an expired leaf is
// checked as of its last valid second (it passes; a forged one does not).
func verifyChainAt(roots *x509.CertPool, acceptExpired bool) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("tls: the peer sent no certificate")
		}
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		inter := x509.NewCertPool()
		for _, r := range raw[1:] {
			if c, err := x509.ParseCertificate(r); err == nil {
				inter.AddCert(c)
			}
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: inter}
		if acceptExpired && time.Now().After(leaf.NotAfter) {
			// The last moment it was valid, which its CA's validity
			// covers too.
			opts.CurrentTime = leaf.NotAfter.Add(-time.Second)
		}
		_, err = leaf.Verify(opts)
		return err
	}
}

// Credentials are the SASL user and password (sasl.password, or the
// trimmed content of sasl.password.file), for clients other than
// franz-go's.
func (s ClientSecurity) Credentials() (user, password string, err error) {
	password, err = s.password()
	return s.Username, password, err
}

// password returns sasl.password, or the trimmed content of
// sasl.password.file.
func (s ClientSecurity) password() (string, error) {
	if s.PasswordFile == "" {
		return s.Password.Reveal(), nil
	}
	b, err := os.ReadFile(s.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("sasl.password.file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// SASLMechanism is franz-go's mechanism for the config; nil without SASL.
func (s ClientSecurity) SASLMechanism() (sasl.Mechanism, error) {
	if !s.SASL() {
		return nil, nil
	}
	pw, err := s.password()
	if err != nil {
		return nil, err
	}
	switch s.Mechanism {
	case "PLAIN":
		return plain.Auth{User: s.Username, Pass: pw}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.Username, Pass: pw}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.Username, Pass: pw}.AsSha512Mechanism(), nil
	}
	return nil, &InvalidError{Key: "sasl.mechanism", Value: s.Mechanism, Reason: "expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"}
}

// DialFunc dials like net.Dialer.DialContext.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// WrapDial returns dial with the TLS handshake added (dial itself when
// the config has no TLS; a net.Dialer when dial is nil). The server name
// is the host dialled, as Kafka's clients check it.
func (s ClientSecurity) WrapDial(dial DialFunc) (DialFunc, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	tc, err := s.TLSConfig()
	if err != nil || tc == nil {
		return dial, err
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := tc.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil && c.ServerName == "" {
			c.ServerName = host
		}
		t := tls.Client(nc, c)
		if err := t.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		return t, nil
	}, nil
}

// KgoOpts are franz-go options connecting through dial (nil: directly)
// with the config's TLS and SASL. TLS goes into the dialer, since kgo
// takes either its own TLS dialer or a custom one.
func (s ClientSecurity) KgoOpts(dial DialFunc) ([]kgo.Opt, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	switch {
	case s.TLS():
		d, err := s.WrapDial(dial)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.Dialer(d))
	case dial != nil:
		opts = append(opts, kgo.Dialer(dial))
	}
	mech, err := s.SASLMechanism()
	if err != nil {
		return nil, err
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}
