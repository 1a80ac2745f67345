package security

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/isrlab/isrlab/kafkaconfig"
)

// keyPair reads the listener's PEM keystore: ssl.keystore.location (a
// file holding the private key and the certificate chain, as Kafka's PEM
// keystore), or ssl.keystore.key with ssl.keystore.certificate.chain.
func keyPair(cfg *kafkaconfig.Config, listener string) (tls.Certificate, bool, error) {
	get := func(k string) string { return cfg.ForListener(listener, "", k) }
	var certPEM, keyPEM []byte
	switch loc := get("ssl.keystore.location"); {
	case loc != "" && (get("ssl.keystore.key") != "" || get("ssl.keystore.certificate.chain") != ""):
		return tls.Certificate{}, false, &kafkaconfig.InvalidError{Key: "ssl.keystore.location", Value: loc, Reason: "set either ssl.keystore.location or ssl.keystore.key with ssl.keystore.certificate.chain, not both"}
	case loc != "":
		b, err := os.ReadFile(loc)
		if err != nil {
			return tls.Certificate{}, false, fmt.Errorf("ssl.keystore.location: %w", err)
		}
		certPEM, keyPEM = b, b
	case get("ssl.keystore.key") != "" || get("ssl.keystore.certificate.chain") != "":
		certPEM, keyPEM = []byte(get("ssl.keystore.certificate.chain")), []byte(get("ssl.keystore.key"))
	default:
		return tls.Certificate{}, false, nil
	}
	keyPEM, err := decryptKey(keyPEM, get("ssl.key.password"))
	if err != nil {
		return tls.Certificate{}, false, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The error names no key material.
		return tls.Certificate{}, false, fmt.Errorf("listener %s keystore: %w", listener, err)
	}
	return cert, true, nil
}

// decryptKey returns the PEM private key blocks of b, decrypting a
// legacy encrypted block with password; certificates pass through.
func decryptKey(b []byte, password string) ([]byte, error) {
	var out []byte
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out, nil
		}
		if blk.Type == "ENCRYPTED PRIVATE KEY" {
			return nil, errors.New("ssl.keystore: encrypted PKCS#8 keys are not supported; give an unencrypted key (file mode 0600)")
		}
		//lint:ignore SA1019 legacy PEM encryption is the only one the standard library reads.
		if x509.IsEncryptedPEMBlock(blk) { //nolint:staticcheck
			if password == "" {
				return nil, errors.New("ssl.keystore: the private key is encrypted and ssl.key.password is not set")
			}
			der, err := x509.DecryptPEMBlock(blk, []byte(password)) //nolint:staticcheck
			if err != nil {
				return nil, errors.New("ssl.keystore: cannot decrypt the private key with ssl.key.password")
			}
			blk = &pem.Block{Type: blk.Type, Bytes: der}
		}
		out = append(out, pem.EncodeToMemory(blk)...)
	}
}

// trustPool reads the listener's PEM truststore; nil when none is set.
func trustPool(cfg *kafkaconfig.Config, listener string) (*x509.CertPool, error) {
	get := func(k string) string { return cfg.ForListener(listener, "", k) }
	var b []byte
	switch loc := get("ssl.truststore.location"); {
	case loc != "":
		var err error
		if b, err = os.ReadFile(loc); err != nil {
			return nil, fmt.Errorf("ssl.truststore.location: %w", err)
		}
	case get("ssl.truststore.certificates") != "":
		b = []byte(get("ssl.truststore.certificates"))
	default:
		return nil, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("listener %s truststore: no PEM certificate in it", listener)
	}
	return pool, nil
}

// ServerTLS is the TLS configuration of an SSL or SASL_SSL listener:
// its keystore, and with ssl.client.auth requested or required the
// truststore client certificates are checked against.
func ServerTLS(cfg *kafkaconfig.Config, listener string) (*tls.Config, *Keystore, error) {
	cert, ok, err := keyPair(cfg, listener)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, &kafkaconfig.InvalidError{Key: "ssl.keystore.location", Value: "", Reason: fmt.Sprintf("listener %s uses TLS and has no keystore", listener)}
	}
	ks := &Keystore{cfg: cfg, listener: listener}
	ks.cur.Store(&cert)
	tc := &tls.Config{GetCertificate: ks.get, MinVersion: tls.VersionTLS12}
	tc, err = serverAuth(cfg, listener, tc)
	return tc, ks, err
}

// serverAuth adds ssl.client.auth and its truststore to tc.
func serverAuth(cfg *kafkaconfig.Config, listener string, tc *tls.Config) (*tls.Config, error) {
	var err error
	auth := cfg.ForListener(listener, "", "ssl.client.auth")
	switch auth {
	case "none":
		return tc, nil
	case "requested":
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	case "required":
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, &kafkaconfig.InvalidError{Key: "ssl.client.auth", Value: auth, Reason: "expected none, requested or required"}
	}
	if tc.ClientCAs, err = trustPool(cfg, listener); err != nil {
		return nil, err
	}
	if tc.ClientCAs == nil {
		return nil, &kafkaconfig.InvalidError{Key: "ssl.truststore.location", Value: "", Reason: fmt.Sprintf("listener %s checks client certificates (ssl.client.auth=%s) and has no truststore", listener, auth)}
	}
	return tc, nil
}

// ClientTLS is how this broker connects to another broker's listener:
// the listener's truststore (the system roots when none), its keystore as
// the client certificate, and the host name checked unless
// ssl.endpoint.identification.algorithm is empty.
func ClientTLS(cfg *kafkaconfig.Config, listener string) (*tls.Config, error) {
	pool, err := trustPool(cfg, listener)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert, ok, err := keyPair(cfg, listener); err != nil {
		return nil, err
	} else if ok {
		tc.Certificates = []tls.Certificate{cert}
	}
	if cfg.String("ssl.endpoint.identification.algorithm") == "" {
		tc.InsecureSkipVerify = true
		tc.VerifyPeerCertificate = kafkaconfig.VerifyChain(pool)
	}
	return tc, nil
}

// Keystore is a TLS listener's certificate. A dynamic update of
// listener.name.<l>.ssl.keystore.location replaces it while the listener
// serves (Kafka's DynamicBrokerConfig reconfiguring the listener's
// SslFactory): new handshakes present the new certificate, connections
// already open keep theirs.
type Keystore struct {
	cfg      *kafkaconfig.Config
	listener string
	cur      atomic.Pointer[tls.Certificate]
}

func (k *Keystore) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return k.cur.Load(), nil }

// Leaf is the certificate the listener presents now.
func (k *Keystore) Leaf() *x509.Certificate {
	c := k.cur.Load()
	if c.Leaf != nil {
		return c.Leaf
	}
	leaf, _ := x509.ParseCertificate(c.Certificate[0])
	return leaf
}

// Reload reads the PEM keystore at location (the listener's
// ssl.key.password decrypts it) and, with apply, serves it from now on.
// As Kafka's SslFactory does, a keystore whose certificate names another
// subject or other subject alternative names than the current one is
// refused; its validity is not checked (an expired certificate is the
// operator's to install).
func (k *Keystore) Reload(location string, apply bool) error {
	b, err := os.ReadFile(location)
	if err != nil {
		return fmt.Errorf("ssl.keystore.location: %w", err)
	}
	keyPEM, err := decryptKey(b, k.cfg.ForListener(k.listener, "", "ssl.key.password"))
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(b, keyPEM)
	if err != nil {
		return fmt.Errorf("listener %s keystore %s: %w", k.listener, location, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("listener %s keystore %s: %w", k.listener, location, err)
	}
	old := k.Leaf()
	if old.Subject.String() != leaf.Subject.String() {
		return fmt.Errorf("keystore DistinguishedName does not match: existing=%s, new=%s", old.Subject, leaf.Subject)
	}
	if sans(old) != sans(leaf) {
		return fmt.Errorf("keystore SubjectAltNames do not match: existing=%s, new=%s", sans(old), sans(leaf))
	}
	if apply {
		cert.Leaf = leaf
		k.cur.Store(&cert)
	}
	return nil
}

// sans lists a certificate's IP and DNS subject alternative names.
func sans(c *x509.Certificate) string {
	var out []string
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	out = append(out, c.DNSNames...)
	slices.Sort(out)
	return strings.Join(out, ",")
}
