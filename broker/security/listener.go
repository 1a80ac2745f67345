// Package security is the broker's transport security: listeners and
// their security protocols, TLS from PEM keystores and truststores, and
// SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with Kafka's
// SaslHandshake/SaslAuthenticate exchange (KIP-43, KIP-152) and
// re-authentication (KIP-368), on the server side of a connection and for
// the broker's own connections to other brokers. Names and semantics are
// Kafka's; docs/security.md is the user's guide.
package security

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/isrlab/isrlab/kafkaconfig"
)

// Protocol is a Kafka security protocol.
type Protocol string

// Kafka's security protocols.
const (
	Plaintext     Protocol = "PLAINTEXT"
	SSL           Protocol = "SSL"
	SASLPlaintext Protocol = "SASL_PLAINTEXT"
	SASLSSL       Protocol = "SASL_SSL"
)

// TLS reports whether the protocol runs over TLS.
func (p Protocol) TLS() bool { return p == SSL || p == SASLSSL }

// SASL reports whether the protocol authenticates with SASL.
func (p Protocol) SASL() bool { return p == SASLPlaintext || p == SASLSSL }

func protocolOf(s string) (Protocol, bool) {
	switch p := Protocol(strings.ToUpper(s)); p {
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
		return p, true
	}
	return "", false
}

// Listener is one entry of listeners (or advertised.listeners): a name,
// the security protocol listener.security.protocol.map gives it, and
// host:port.
type Listener struct {
	Name     string // upper case, as Kafka normalizes listener names
	Protocol Protocol
	Host     string
	Port     int
}

// Addr is host:port.
func (l Listener) Addr() string { return net.JoinHostPort(l.Host, strconv.Itoa(l.Port)) }

// URL is NAME://host:port, the form brokers register.
func (l Listener) URL() string { return l.Name + "://" + l.Addr() }

// ProtocolMap parses listener.security.protocol.map.
func ProtocolMap(s string) (map[string]Protocol, error) {
	m := map[string]Protocol{}
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		name, proto, ok := strings.Cut(pair, ":")
		p, known := protocolOf(strings.TrimSpace(proto))
		if !ok || !known || strings.TrimSpace(name) == "" {
			return nil, &kafkaconfig.InvalidError{Key: "listener.security.protocol.map", Value: s, Reason: fmt.Sprintf("%q is not NAME:PROTOCOL with a protocol of PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", pair)}
		}
		m[strings.ToUpper(strings.TrimSpace(name))] = p
	}
	return m, nil
}

// ParseListeners parses a listeners or advertised.listeners value (key
// names it in errors) against listener.security.protocol.map: each name
// must be in the map and appear once.
func ParseListeners(key string, list []string, protocols map[string]Protocol) ([]Listener, error) {
	var out []Listener
	seen := map[string]bool{}
	for _, item := range list {
		// Not url.Parse: listener names such as SASL_SSL are not URL
		// schemes.
		scheme, hostport, ok := strings.Cut(strings.TrimSpace(item), "://")
		if !ok || scheme == "" || hostport == "" {
			return nil, &kafkaconfig.InvalidError{Key: key, Value: item, Reason: "expected NAME://host:port"}
		}
		name := strings.ToUpper(scheme)
		p, ok := protocols[name]
		if !ok {
			return nil, &kafkaconfig.InvalidError{Key: key, Value: item, Reason: fmt.Sprintf("listener %s has no security protocol in listener.security.protocol.map", name)}
		}
		if seen[name] {
			return nil, &kafkaconfig.InvalidError{Key: key, Value: item, Reason: fmt.Sprintf("listener %s is given twice", name)}
		}
		seen[name] = true
		host, port, err := net.SplitHostPort(hostport)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 0 || n > 65535 {
			return nil, &kafkaconfig.InvalidError{Key: key, Value: item, Reason: "expected NAME://host:port"}
		}
		out = append(out, Listener{Name: name, Protocol: p, Host: host, Port: n})
	}
	if len(out) == 0 {
		return nil, &kafkaconfig.InvalidError{Key: key, Value: "", Reason: "no listener"}
	}
	return out, nil
}

// Listeners reads listeners, and the name of the inter-broker listener:
// inter.broker.listener.name, or else the listener whose protocol is
// security.inter.broker.protocol (Kafka's rule: the name equal to the
// protocol). Setting both is an error, as in Kafka.
func Listeners(cfg *kafkaconfig.Config) (ls []Listener, interBroker string, err error) {
	protocols, err := ProtocolMap(cfg.String("listener.security.protocol.map"))
	if err != nil {
		return nil, "", err
	}
	if ls, err = ParseListeners("listeners", cfg.List("listeners"), protocols); err != nil {
		return nil, "", err
	}
	name := strings.ToUpper(cfg.String("inter.broker.listener.name"))
	switch {
	case name != "" && cfg.IsSet("security.inter.broker.protocol"):
		return nil, "", &kafkaconfig.InvalidError{Key: "inter.broker.listener.name", Value: name, Reason: "only one of inter.broker.listener.name and security.inter.broker.protocol may be set"}
	case name == "":
		name = cfg.String("security.inter.broker.protocol")
	}
	for _, l := range ls {
		if l.Name == name {
			return ls, name, nil
		}
	}
	return nil, "", &kafkaconfig.InvalidError{Key: "inter.broker.listener.name", Value: name, Reason: "no listener of that name in listeners"}
}
