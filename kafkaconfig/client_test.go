package kafkaconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestClientSecurityHidesPassword(t *testing.T) {
	s, err := ParseClientSecurity(map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "hunter2-secret"})
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(s)
	y, _ := yaml.Marshal(s)
	for what, out := range map[string]string{"json": string(j), "yaml": string(y), "%v": fmt.Sprintf("%v", s), "%+v": fmt.Sprintf("%+v", s)} {
		if strings.Contains(out, "hunter2") {
			t.Errorf("%s shows the password: %s", what, out)
		}
	}
	if !strings.Contains(string(j), `"sasl.password":"[hidden]"`) {
		t.Errorf("json %s does not say the password is hidden", j)
	}
	if m, err := s.SASLMechanism(); err != nil || m.Name() != "SCRAM-SHA-512" {
		t.Fatal(m, err)
	}
	for _, bad := range []map[string]string{
		{"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "a", "sasl.password": "p"},
		{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": "p"},
		{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a"},
		{"security.protocol": "TLS"},
		{"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"},
	} {
		if _, err := ParseClientSecurity(bad); err == nil {
			t.Errorf("%v accepted", bad)
		} else if strings.Contains(err.Error(), `"p"`) {
			t.Errorf("error quotes a password: %v", err)
		}
	}
}

func TestFileConfigProvider(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets.properties")
	if err := os.WriteFile(secrets, []byte("admin.password=s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jaas := `listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=ScramLoginModule required username="admin" password="${file:` + secrets + `:admin.password}";`
	c, _, err := Load("", []string{"log.dirs=/tmp/x", "config.providers=file", "config.providers.file.class=" + FileConfigProvider, jaas})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ForListener("SASL_SSL", "SCRAM-SHA-512", "sasl.jaas.config"); !strings.Contains(got, `password="s3cret"`) {
		t.Fatalf("jaas = %q", got)
	}
	if r := c.Redacted()["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]; r != hidden {
		t.Errorf("redacted jaas = %q", r)
	}
	_, _, err = Load("", []string{"log.dirs=/tmp/x", "config.providers=file", "config.providers.file.class=" + FileConfigProvider,
		`sasl.jaas.config=M required password="${file:` + secrets + `:missing}";`})
	if err == nil || !strings.Contains(err.Error(), "missing is not in") {
		t.Fatalf("missing key: %v", err)
	}
	// Without config.providers the reference stays as written, as in Kafka.
	c, _, err = Load("", []string{"log.dirs=/tmp/x", `sasl.jaas.config=M required password="${file:` + secrets + `:admin.password}";`})
	if err != nil || !strings.Contains(c.String("sasl.jaas.config"), "${file:") {
		t.Fatal(err, c.String("sasl.jaas.config"))
	}
}

// TestAcceptExpired: the operator's connection (AcceptExpired) takes an
// expired certificate from the trusted CA and still refuses one from
// another CA; a normal client refuses the expired one.
func TestAcceptExpired(t *testing.T) {
	mk := func(name string) (*x509.Certificate, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		c, _ := x509.ParseCertificate(der)
		return c, key
	}
	ca, caKey := mk("ca")
	other, otherKey := mk("other")
	leaf := func(parent *x509.Certificate, key *ecdsa.PrivateKey) []byte {
		lk, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "b1"},
			NotBefore: time.Now().Add(-30 * time.Minute), NotAfter: time.Now().Add(-time.Minute), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		der, _ := x509.CreateCertificate(rand.Reader, tmpl, parent, &lk.PublicKey, key)
		return der
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if err := verifyChainAt(roots, true)([][]byte{leaf(ca, caKey)}, nil); err != nil {
		t.Errorf("expired leaf of the trusted CA, accepting expired: %v", err)
	}
	if err := verifyChainAt(roots, true)([][]byte{leaf(other, otherKey)}, nil); err == nil {
		t.Error("a leaf of another CA was accepted")
	}
	if err := VerifyChain(roots)([][]byte{leaf(ca, caKey)}, nil); err == nil {
		t.Error("an expired leaf was accepted by a normal client")
	}
}

// TestClientSecurityProperties: Properties reads back through
// ParseClientSecurity as the same config, and never holds an inline
// password.
func TestClientSecurityProperties(t *testing.T) {
	s := ClientSecurity{Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-512", Username: "u", PasswordFile: "/pw",
		CALocation: "/ca.pem", EndpointIdentification: "none"}
	m := map[string]string{}
	for _, p := range s.Properties() {
		m[p.Key] = p.Value
	}
	back, err := ParseClientSecurity(m)
	if err != nil || back != s {
		t.Errorf("%+v read back as %+v (%v)", s, back, err)
	}
	s.Password, s.PasswordFile = "pw", ""
	for _, p := range s.Properties() {
		if p.Key == "sasl.password" {
			t.Error("an inline password written")
		}
	}
}
