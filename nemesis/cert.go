package nemesis

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/pki"
	"github.com/isrlab/isrlab/units"
)

func init() {
	register(func() Fault { return &CertExpiry{} })
	register(func() Fault { return &CARotation{} })
}

// CertExpiry gives brokers of a secured cluster (the secured preset) a
// certificate that expires ExpiresAfter from the injection (at once by
// default), as a certificate that runs out mid-run: the lab issues it
// from the run's CA, writes it over the broker's keystore and makes the
// broker read it through the dynamic config
// listener.name.sasl_ssl.ssl.keystore.location, as an operator
// reconfigures a listener's keystore in Kafka. Clients check a
// certificate in the handshake only: connections already open go on, and
// once it has expired every new handshake with the broker fails (clients
// and brokers alike: a follower that reconnects to it, a controller that
// sends it metadata). Heal renews the certificate the same way (the lab's
// operator connection accepts the expired one to do so).
type CertExpiry struct {
	procNodes
	// ExpiresAfter is how long the new certificate stays valid after the
	// injection (0: it is expired when installed).
	ExpiresAfter units.Duration `json:"expires.after,omitempty"`
}

type certExpiryRun struct {
	CertExpiry `json:"-"`
	nodesRun
	// NotAfter is when the installed certificates expire (RFC 3339).
	NotAfter string `json:"not_after,omitempty"`
}

// NewRun implements Fault.
func (f *CertExpiry) NewRun() Run { return &certExpiryRun{CertExpiry: *f} }

// Kind implements Fault.
func (*CertExpiry) Kind() string { return "cert-expiry" }

// Validate implements validator.
func (f *CertExpiry) Validate() error {
	if f.ExpiresAfter < 0 {
		return fmt.Errorf("%w: cert-expiry: expires.after must not be negative", ErrBadFault)
	}
	return nil
}

// Resolve implements Run: the targets must be brokers of a secured
// cluster the lab laid out.
func (f *certExpiryRun) Resolve(ctx context.Context, env *Env) error {
	if err := f.Validate(); err != nil {
		return err
	}
	ns, err := securedBrokers(ctx, env, f.Kind(), f.procNodes)
	f.Resolved = ns
	return err
}

// securedBrokers resolves p's targets, which must be brokers of a
// secured cluster the lab laid out.
func securedBrokers(ctx context.Context, env *Env, kind string, p procNodes) ([]string, error) {
	if env.Cluster.Topology.Security == nil {
		return nil, fmt.Errorf("%w: %s needs a secured cluster (the secured preset)", ErrUnsupported, kind)
	}
	ns, err := p.targets(ctx, env, kind)
	if err != nil {
		return nil, err
	}
	for _, name := range ns {
		n, err := env.node(name)
		if err != nil {
			return nil, err
		}
		if n.Role != compose.RoleBroker {
			return nil, fmt.Errorf("%w: %s: %s is not a broker", ErrBadFault, kind, name)
		}
	}
	return ns, nil
}

// Inject implements Run.
func (f *certExpiryRun) Inject(ctx context.Context, env *Env) error {
	now := time.Now()
	v := pki.Validity{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Duration(f.ExpiresAfter))}
	if f.ExpiresAfter == 0 {
		v.NotAfter = now.Add(-time.Second)
	}
	f.NotAfter = v.NotAfter.UTC().Format(time.RFC3339)
	return f.install(ctx, env, v)
}

// Heal implements Run: a certificate valid for a week, as the run's first.
func (f *certExpiryRun) Heal(ctx context.Context, env *Env) error {
	if env.Cluster.Topology.Security == nil {
		return nil
	}
	return f.install(ctx, env, pki.For(time.Now(), 7*24*time.Hour))
}

// install renews each target's certificate with validity v and has the
// broker read it, through that broker (a broker's listener config is
// changed on the broker itself).
func (f *certExpiryRun) install(ctx context.Context, env *Env, v pki.Validity) error {
	return installCerts(ctx, env, f.Kind(), f.Resolved, v, nil, "")
}

// installCerts issues each named broker a certificate valid for v, from
// ca (nil: the run's), writes it over its keystore and has the broker
// read it, through that broker (a broker's listener config is changed on
// the broker itself), connecting as the operator: it accepts an expired
// certificate and trusts the CAs in trust (default: the run's CA file).
func installCerts(ctx context.Context, env *Env, kind string, nodes []string, v pki.Validity, ca *pki.CA, trust string) error {
	sec := env.Cluster.Topology.Security
	admin := sec.Admin()
	admin.AcceptExpired = true
	if trust != "" {
		admin.CALocation = trust
	}
	opts, err := admin.KgoOpts(env.Cluster.Dial())
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	for _, name := range nodes {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		if ca == nil {
			err = sec.RenewBroker(n.NodeSpec, v)
		} else {
			err = sec.IssueBroker(n.NodeSpec, v, ca)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(n.KafkaAddr()))...)
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		loc := sec.Keystore(n.NodeSpec)
		rs, err := kadm.NewClient(cl).AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: compose.KeystoreKey, Value: &loc}}, int32(n.ID))
		cl.Close()
		if err == nil && len(rs) > 0 {
			err = rs[0].Err
		}
		if err != nil {
			return fmt.Errorf("%s: %s (broker %s) reads its keystore: %w", kind, name, strconv.Itoa(n.ID), err)
		}
	}
	return nil
}

// CARotation rotates the named brokers of a secured cluster to
// certificates of a new CA that nobody trusts yet, as an operator who
// rotated the brokers' certificates before adding the new CA to the
// clients' and brokers' truststores: installed through the dynamic
// listener.name.sasl_ssl.ssl.keystore.location like cert-expiry.
// Connections already open go on; every new handshake with those brokers
// fails ("certificate signed by unknown authority"), from clients and
// from the other brokers alike. Heal gives them certificates of the run's
// CA again. The new CA's key lives in memory only.
type CARotation struct {
	procNodes
}

type caRotationRun struct {
	CARotation `json:"-"`
	nodesRun
	// CA names the new CA.
	CA string `json:"ca,omitempty"`
}

// NewRun implements Fault.
func (f *CARotation) NewRun() Run { return &caRotationRun{CARotation: *f} }

// Kind implements Fault.
func (*CARotation) Kind() string { return "ca-rotation" }

// Resolve implements Run.
func (f *caRotationRun) Resolve(ctx context.Context, env *Env) error {
	ns, err := securedBrokers(ctx, env, f.Kind(), f.procNodes)
	f.Resolved = ns
	return err
}

// Inject implements Run.
func (f *caRotationRun) Inject(ctx context.Context, env *Env) error {
	sec := env.Cluster.Topology.Security
	v := pki.For(time.Now(), 7*24*time.Hour)
	ca, err := pki.NewCA(fmt.Sprintf("isrlab %s run %s rotated CA %s", env.Cluster.Name, env.runID(), env.id), v)
	if err != nil {
		return fmt.Errorf("ca-rotation: %w", err)
	}
	old, err := os.ReadFile(sec.CAFile())
	if err != nil {
		return fmt.Errorf("ca-rotation: %w", err)
	}
	trust, err := pki.WriteFile(sec.SecretsDir, caRotationTrust(env), append(append([]byte{}, old...), ca.CertPEM...))
	if err != nil {
		return fmt.Errorf("ca-rotation: %w", err)
	}
	f.CA = ca.Cert.Subject.CommonName
	return installCerts(ctx, env, f.Kind(), f.Resolved, v, ca, trust)
}

// caRotationTrust is the file, in the secrets directory, that holds the
// run's CA and the fault's new one: the operator's truststore.
func caRotationTrust(env *Env) string { return "ca-rotation-" + env.id + ".pem" }

// Heal implements Run: certificates of the run's CA again.
func (f *caRotationRun) Heal(ctx context.Context, env *Env) error {
	if env.Cluster.Topology.Security == nil {
		return nil
	}
	trust := filepath.Join(env.Cluster.Topology.Security.SecretsDir, caRotationTrust(env))
	return installCerts(ctx, env, f.Kind(), f.Resolved, pki.For(time.Now(), 7*24*time.Hour), nil, trust)
}
