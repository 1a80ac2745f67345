package kafkaconfig

import "strings"

// ListenerScoped are the broker keys Kafka also reads with a listener
// prefix, listener.name.<listener>.<key>, and for the SASL keys with a
// mechanism after the listener, listener.name.<listener>.<mechanism>.<key>
// (lower case, as Kafka writes them: listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config).
var ListenerScoped = map[string]bool{
	"ssl.keystore.type": true, "ssl.keystore.location": true, "ssl.keystore.certificate.chain": true,
	"ssl.keystore.key": true, "ssl.key.password": true, "ssl.truststore.type": true,
	"ssl.truststore.location": true, "ssl.truststore.certificates": true, "ssl.client.auth": true,
	"sasl.enabled.mechanisms": true, "sasl.jaas.config": true, "connections.max.reauth.ms": true,
}

// saslKeys are the listener-scoped keys that may carry a mechanism.
var saslKeys = map[string]bool{"sasl.jaas.config": true, "connections.max.reauth.ms": true}

// listenerBase returns the key a listener-prefixed key overrides.
func listenerBase(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "listener.name.")
	if !ok {
		return "", false
	}
	_, rest, ok = strings.Cut(rest, ".")
	if !ok || rest == "" {
		return "", false
	}
	if ListenerScoped[rest] {
		return rest, true
	}
	// A mechanism (plain, scram-sha-256, ...) before a SASL key.
	if _, k, ok := strings.Cut(rest, "."); ok && saslKeys[k] {
		return k, true
	}
	return "", false
}

// ForListener returns key's value for one listener (and, for the SASL
// keys, one mechanism; empty for none): the most specific of
// listener.name.<l>.<mech>.<key>, listener.name.<l>.<key> and <key>
// that is set, else key's default. Listener and mechanism names are
// matched in lower case, as Kafka does.
func (c *Config) ForListener(listener, mechanism, key string) string {
	l := strings.ToLower(listener)
	if mechanism != "" {
		if k := "listener.name." + l + "." + strings.ToLower(mechanism) + "." + key; c.set[k] {
			return c.values[k]
		}
	}
	if k := "listener.name." + l + "." + key; c.set[k] {
		return c.values[k]
	}
	return c.raw(key)
}

// Redacted returns every explicitly set key with its value, a password's
// value replaced by "[hidden]", for logs and stored run files.
func (c *Config) Redacted() map[string]string {
	out := map[string]string{}
	for k := range c.set {
		v := c.values[k]
		if c.defs[k].Type == Password {
			v = "[hidden]"
		}
		out[k] = v
	}
	return out
}
