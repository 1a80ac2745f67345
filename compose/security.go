package compose

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose/pki"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// Security is a secured cluster's layout (Options.Secured): each broker
// has one SASL_SSL listener, used by clients and between brokers, with
// SCRAM-SHA-512. A throwaway CA and the brokers' certificates (SANs: the
// broker's address and name) are made when the cluster comes up and
// kept under the run directory (TLSDir); the passwords of the brokers'
// user (AdminUser) and the clients' (ClientUser) are random, live in
// SecretsDir outside the run directory, and go when the cluster does.
// The brokers read their password through Kafka's file config provider;
// both users are created in the coordinator before the brokers start.
type Security struct {
	TLSDir     string `json:"tls_dir"`
	SecretsDir string `json:"secrets_dir"`
	Mechanism  string `json:"mechanism"`
	AdminUser  string `json:"admin_user"`
	ClientUser string `json:"client_user"`
}

// SecuredMechanism is a secured cluster's SASL mechanism.
const SecuredMechanism = "SCRAM-SHA-512"

// Secured cluster file names.
const (
	caFile           = "ca.pem"
	caKeyFile        = "ca-key.pem"        // in SecretsDir: for certificates issued during the run (RenewBroker)
	brokerSecrets    = "broker.properties" // admin.password=..., for the file config provider
	clientPassword   = "client.password"   // sasl.password.file of the lab's clients
	adminPassword    = "admin.password"    // the same for the brokers' user, for the lab's admin work
	adminScramConfig = "admin-scram.properties"
	userScramConfig  = "client-scram.properties"
)

func newSecurity(runDir, runID string) *Security {
	return &Security{
		TLSDir:     filepath.Join(runDir, "tls"),
		SecretsDir: filepath.Join(StateDir(), "secrets-"+runID),
		Mechanism:  SecuredMechanism,
		AdminUser:  "admin",
		ClientUser: "client",
	}
}

// Client is how the lab's clients connect: SASL_SSL as ClientUser,
// trusting the run's CA.
func (s *Security) Client() kafkaconfig.ClientSecurity {
	return kafkaconfig.ClientSecurity{
		Protocol: "SASL_SSL", Mechanism: s.Mechanism, Username: s.ClientUser,
		PasswordFile: filepath.Join(s.SecretsDir, clientPassword),
		CALocation:   filepath.Join(s.TLSDir, caFile),
	}
}

// Admin connects as AdminUser, the brokers' own user: for what the lab
// changes in the cluster as its operator (a SCRAM password fault).
func (s *Security) Admin() kafkaconfig.ClientSecurity {
	c := s.Client()
	c.Username, c.PasswordFile = s.AdminUser, filepath.Join(s.SecretsDir, adminPassword)
	return c
}

// Summary is a secured layout in one line, for a plan.
func (s *Security) Summary() string {
	return fmt.Sprintf("secured: one SASL_SSL listener per broker (%s), a CA and certificates made at bring-up in %s, users %s and %s created in the coordinators",
		s.Mechanism, s.TLSDir, s.AdminUser, s.ClientUser)
}

// Password is user's password as the run made it (AdminUser or
// ClientUser), read from the secrets directory.
func (s *Security) Password(user string) (string, error) {
	file := map[string]string{s.AdminUser: adminPassword, s.ClientUser: clientPassword}[user]
	if file == "" {
		return "", fmt.Errorf("secured cluster: no user %q (the run has %s and %s)", user, s.AdminUser, s.ClientUser)
	}
	b, err := os.ReadFile(filepath.Join(s.SecretsDir, file))
	if err != nil {
		return "", fmt.Errorf("secured cluster: password of %s: %w", user, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// brokerProperties are a secured broker's keys (listeners are set by
// BrokerProperties).
func (s *Security) brokerProperties(n NodeSpec) []KV {
	jaas := fmt.Sprintf(`org.apache.kafka.common.security.scram.ScramLoginModule required username="%s" password="${file:%s:admin.password}";`,
		s.AdminUser, filepath.Join(s.SecretsDir, brokerSecrets))
	return []KV{
		{"inter.broker.listener.name", "SASL_SSL"},
		{"ssl.keystore.type", "PEM"},
		{"ssl.keystore.location", s.Keystore(n)},
		{"ssl.truststore.type", "PEM"},
		{"ssl.truststore.location", filepath.Join(s.TLSDir, caFile)},
		{"sasl.enabled.mechanisms", s.Mechanism},
		{"sasl.mechanism.inter.broker.protocol", s.Mechanism},
		{"config.providers", "file"},
		{"config.providers.file.class", kafkaconfig.FileConfigProvider},
		{"listener.name.sasl_ssl." + strings.ToLower(s.Mechanism) + ".sasl.jaas.config", jaas},
	}
}

func password() string {
	b := make([]byte, 24)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Prepare makes the run's CA, the brokers' certificates and the users'
// passwords. Backends call it once the run directory exists, before any
// node starts.
func (s *Security) Prepare(t Topology, now time.Time) error {
	v := pki.For(now, 7*24*time.Hour)
	ca, err := pki.NewCA("isrlab "+t.Name+" run "+t.RunID, v)
	if err != nil {
		return err
	}
	if _, err := pki.WriteFile(s.TLSDir, caFile, ca.CertPEM); err != nil {
		return err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	if _, err := pki.WriteFile(s.SecretsDir, caKeyFile, caKey); err != nil {
		return err
	}
	for _, b := range t.Role(RoleBroker) {
		pair, err := ca.Issue(b.Name, []string{b.Addr.String(), b.Name}, v)
		if err != nil {
			return err
		}
		if _, err := pki.WriteFile(s.TLSDir, b.Name+".pem", pair.Keystore()); err != nil {
			return err
		}
	}
	admin, client := password(), password()
	files := map[string]string{
		brokerSecrets:    "admin.password=" + admin + "\n",
		clientPassword:   client + "\n",
		adminPassword:    admin + "\n",
		adminScramConfig: s.Mechanism + "=[iterations=4096,password=" + admin + "]\n",
		userScramConfig:  s.Mechanism + "=[iterations=4096,password=" + client + "]\n",
	}
	for name, content := range files {
		if _, err := pki.WriteFile(s.SecretsDir, name, []byte(content)); err != nil {
			return err
		}
	}
	return nil
}

// Keystore is broker n's PEM keystore (its key and certificate).
func (s *Security) Keystore(n NodeSpec) string { return filepath.Join(s.TLSDir, n.Name+".pem") }

// KeystoreKey is the dynamic broker config that makes a broker read its
// keystore again (listener.name.sasl_ssl.ssl.keystore.location).
const KeystoreKey = "listener.name.sasl_ssl.ssl.keystore.location"

// RenewBroker issues broker n a new certificate from the run's CA, valid
// for v, with the names of the first (its address and name), and writes
// it over n's keystore, whole or not at all. The broker serves it once
// told (KeystoreKey).
func (s *Security) RenewBroker(n NodeSpec, v pki.Validity) error {
	ca, err := s.CA()
	if err != nil {
		return fmt.Errorf("renew %s's certificate: %w", n.Name, err)
	}
	return s.IssueBroker(n, v, ca)
}

// CA is the run's certificate authority, read back from its files.
func (s *Security) CA() (*pki.CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(s.TLSDir, caFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(s.SecretsDir, caKeyFile))
	if err != nil {
		return nil, err
	}
	return pki.LoadCA(certPEM, keyPEM)
}

// CAFile is the run's CA certificate, what every client and broker trusts.
func (s *Security) CAFile() string { return filepath.Join(s.TLSDir, caFile) }

// IssueBroker is RenewBroker with another CA (a CA rotation).
func (s *Security) IssueBroker(n NodeSpec, v pki.Validity, ca *pki.CA) error {
	pair, err := ca.Issue(n.Name, []string{n.Addr.String(), n.Name}, v)
	if err != nil {
		return err
	}
	tmp, err := pki.WriteFile(s.TLSDir, n.Name+".pem.new", pair.Keystore())
	if err != nil {
		return err
	}
	return os.Rename(tmp, s.Keystore(n))
}

// Remove deletes the secrets; it is safe to call twice.
func (s *Security) Remove() error { return os.RemoveAll(s.SecretsDir) }

// CreateUsers writes both users' SCRAM credentials into the coordinator
// with `isrlab configs --coordinator`, run in netns (a client host's
// namespace, which reaches the coordinators), before the brokers start:
// the brokers authenticate to each other as AdminUser.
func (s *Security) CreateUsers(ctx context.Context, t Topology, bin, netns string) error {
	endpoints := strings.Join(t.CoordinatorEndpoints(), ",")
	for user, file := range map[string]string{s.AdminUser: adminScramConfig, s.ClientUser: userScramConfig} {
		cmd := exec.CommandContext(ctx, bin, "configs", "--coordinator", endpoints, "--alter", "--entity-type", "users",
			"--entity-name", user, "--add-config-file", filepath.Join(s.SecretsDir, file), "--timeout", "60s")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := InNetNS(netns, cmd.Run); err != nil {
			return fmt.Errorf("create SCRAM user %s: %w: %s", user, err, strings.TrimSpace(out.String()))
		}
	}
	return nil
}

// CreateUsersFrom is CreateUsers with the coordinators' binary, run in
// the namespace netnsOf names for t's first client host; the backends
// call it once the coordinators run and before any broker starts.
func (s *Security) CreateUsersFrom(ctx context.Context, t Topology, netnsOf func(client string) string) error {
	clients, coords := t.Role(RoleClient), t.Role(RoleCoordinator)
	if len(clients) == 0 || len(coords) == 0 || len(coords[0].Argv) == 0 {
		return fmt.Errorf("secured cluster %s: needs a client host and a coordinator to create its users", t.Name)
	}
	return s.CreateUsers(ctx, t, coords[0].Argv[0], netnsOf(clients[0].Name))
}

// ClientSecurity is how the lab's clients connect to the cluster's
// brokers: as Security's client user on a secured cluster the lab laid
// out, with Client on a cluster it did not (the ssh backend's client
// config); nil for a plaintext cluster.
func (t Topology) ClientSecurity() (*kafkaconfig.ClientSecurity, error) {
	switch {
	case t.Security != nil:
		cs := t.Security.Client()
		return &cs, nil
	case t.Client != nil:
		if t.Client.Password.Placeholder() {
			// The run's state keeps no password.
			return nil, fmt.Errorf("cluster %s: its client config's sasl.password is not kept in the run's state: name the password with sasl.password.file to reach the cluster from other commands", t.Name)
		}
		cs := *t.Client
		return &cs, nil
	}
	return nil, nil
}

// KafkaOpts are the franz-go options that reach the cluster's brokers
// through dial: the dialer alone for a plaintext cluster, TLS and SASL
// as ClientSecurity says for a secured one.
func (t Topology) KafkaOpts(dial DialFunc) ([]kgo.Opt, error) {
	cs, err := t.ClientSecurity()
	if err != nil || cs == nil {
		return []kgo.Opt{kgo.Dialer(dial)}, err
	}
	return cs.KgoOpts(dial)
}

// KafkaOpts are the options of clients reaching the brokers from the
// client host (Dial).
func (c *Cluster) KafkaOpts() ([]kgo.Opt, error) { return c.Topology.KafkaOpts(c.Dial()) }

// securedListener is a secured broker's one listener.
func securedListener(addr netip.Addr) string {
	return "SASL_SSL://" + netip.AddrPortFrom(addr, BrokerPort).String()
}
