package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/isrlab/isrlab/broker/security"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// listener is one bound listener: its name and protocol, its TLS
// configuration (SSL, SASL_SSL) and SASL configuration (SASL_*).
type listener struct {
	security.Listener
	tls      *tls.Config
	keystore *security.Keystore // the certificate tls presents, reloadable
	sasl     *security.SASLConfig
}

// listeners is the broker's listener configuration, read once by New.
type listeners struct {
	all         []*listener
	interBroker string              // inter.broker.listener.name, resolved
	advertised  []security.Listener // advertised.listeners, else listeners
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
}

// newListeners reads the listener, TLS and SASL configuration and wraps
// base (the broker's dialer) so that connections to other brokers speak
// the inter-broker listener's protocol. Every mistake is reported here,
// before anything binds.
func newListeners(cfg *kafkaconfig.Config, base func(ctx context.Context, network, addr string) (net.Conn, error), now func() time.Time, id int32) (*listeners, error) {
	ls, ib, err := security.Listeners(cfg)
	if err != nil {
		return nil, err
	}
	out := &listeners{interBroker: ib, dial: base}
	for _, l := range ls {
		li := &listener{Listener: l}
		if l.Protocol.TLS() {
			if li.tls, li.keystore, err = security.ServerTLS(cfg, l.Name); err != nil {
				return nil, err
			}
		}
		if l.Protocol.SASL() {
			if li.sasl, err = saslConfig(cfg, l.Name, now); err != nil {
				return nil, err
			}
		}
		out.all = append(out.all, li)
	}
	out.advertised = ls
	if adv := cfg.List("advertised.listeners"); len(adv) > 0 {
		protocols, _ := security.ProtocolMap(cfg.String("listener.security.protocol.map"))
		if out.advertised, err = security.ParseListeners("advertised.listeners", adv, protocols); err != nil {
			return nil, err
		}
	}
	var ibl *listener
	for _, l := range out.all {
		if l.Name == ib {
			ibl = l
		}
	}
	var tc *tls.Config
	if ibl.Protocol.TLS() {
		if tc, err = security.ClientTLS(cfg, ib); err != nil {
			return nil, err
		}
	}
	if ibl.Protocol.SASL() {
		mechName := cfg.String("sasl.mechanism.inter.broker.protocol")
		if !ibl.sasl.Enabled(mechName) {
			return nil, &kafkaconfig.InvalidError{Key: "sasl.mechanism.inter.broker.protocol", Value: mechName, Reason: "not in the inter-broker listener's sasl.enabled.mechanisms"}
		}
		jaas, err := listenerJAAS(cfg, ib, mechName)
		if err != nil {
			return nil, err
		}
		if jaas.Username == "" {
			return nil, &kafkaconfig.InvalidError{Key: "listener.name." + strings.ToLower(ib) + "." + strings.ToLower(mechName) + ".sasl.jaas.config", Value: "[hidden]", Reason: "the inter-broker listener's login module has no username and password for this broker"}
		}
		mech, err := security.ClientMechanism(mechName, jaas.Username, jaas.Password)
		if err != nil {
			return nil, err
		}
		out.dial = security.SecureDialer(base, tc, mech, "broker-"+strconv.Itoa(int(id)))
	} else if tc != nil {
		out.dial = security.SecureDialer(base, tc, nil, "")
	}
	return out, nil
}

// listenerJAAS reads the login module of a listener and mechanism.
func listenerJAAS(cfg *kafkaconfig.Config, listener, mech string) (security.JAAS, error) {
	v := cfg.ForListener(listener, mech, "sasl.jaas.config")
	if v == "" {
		return security.JAAS{Users: map[string]string{}}, nil
	}
	j, err := security.ParseJAAS(v)
	if err != nil {
		return j, fmt.Errorf("listener %s mechanism %s: %w", listener, mech, err)
	}
	return j, nil
}

// saslConfig reads a SASL listener's mechanisms, PLAIN users and session
// lifetimes.
func saslConfig(cfg *kafkaconfig.Config, name string, now func() time.Time) (*security.SASLConfig, error) {
	c := &security.SASLConfig{Listener: name, PlainUsers: map[string]string{}, MaxReauth: map[string]time.Duration{}, Now: now}
	for _, m := range strings.Split(cfg.ForListener(name, "", "sasl.enabled.mechanisms"), ",") {
		m = strings.TrimSpace(m)
		switch m {
		case "":
			continue
		case security.Plain, security.ScramSHA256, security.ScramSHA512:
		default:
			return nil, &kafkaconfig.InvalidError{Key: "sasl.enabled.mechanisms", Value: m, Reason: "isrlab serves PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512"}
		}
		c.Mechanisms = append(c.Mechanisms, m)
		j, err := listenerJAAS(cfg, name, m)
		if err != nil {
			return nil, err
		}
		if m == security.Plain {
			for u, p := range j.Users {
				c.PlainUsers[u] = p
			}
		}
		ms, err := strconv.ParseInt(cfg.ForListener(name, m, "connections.max.reauth.ms"), 10, 64)
		if err != nil || ms < 0 {
			return nil, &kafkaconfig.InvalidError{Key: "connections.max.reauth.ms", Value: cfg.ForListener(name, m, "connections.max.reauth.ms"), Reason: "not a non-negative long"}
		}
		c.MaxReauth[m] = time.Duration(ms) * time.Millisecond
	}
	if len(c.Mechanisms) == 0 {
		return nil, &kafkaconfig.InvalidError{Key: "sasl.enabled.mechanisms", Value: "", Reason: "listener " + name + " uses SASL and enables no mechanism"}
	}
	return security.NewSASLConfig(c), nil
}

// advertisedNamed returns the advertised listener of that name.
func (ls *listeners) advertisedNamed(name string) (security.Listener, bool) {
	for _, a := range ls.advertised {
		if a.Name == name {
			return a, true
		}
	}
	return security.Listener{}, false
}

// endpoints returns this broker's advertised endpoint per listener name,
// given the bound addresses in listener order: a wildcard host advertises
// 127.0.0.1 and port 0 the port the listener got.
func (ls *listeners) endpoints(bound []string) map[string]hostPort {
	out := map[string]hostPort{}
	for i, l := range ls.all {
		a, ok := ls.advertisedNamed(l.Name)
		if !ok {
			continue // not advertised
		}
		host, port := a.Host, a.Port
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		if port == 0 && i < len(bound) {
			_, p, _ := net.SplitHostPort(bound[i])
			port, _ = strconv.Atoi(p)
		}
		out[l.Name] = hostPort{host, int32(port)}
	}
	return out
}

// hostPort is one advertised endpoint.
type hostPort struct {
	Host string
	Port int32
}

// reloadKeystore reads a new keystore for the named listener (a dynamic
// listener.name.<l>.ssl.keystore.location) and, with apply, serves it.
func (ls *listeners) reloadKeystore(name, location string, apply bool) error {
	for _, l := range ls.all {
		if strings.EqualFold(l.Name, name) {
			if l.keystore == nil {
				return fmt.Errorf("listener %s does not use TLS", l.Name)
			}
			return l.keystore.Reload(location, apply)
		}
	}
	return fmt.Errorf("no listener %s", name)
}
