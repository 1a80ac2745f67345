package nemesis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/pki"
	"github.com/isrlab/isrlab/units"
)

func init() { register(func() Fault { return &CertExpiry{} }) }

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
	if env.Cluster.Topology.Security == nil {
		return fmt.Errorf("%w: cert-expiry needs a secured cluster (the secured preset)", ErrUnsupported)
	}
	ns, err := f.targets(ctx, env, f.Kind())
	if err != nil {
		return err
	}
	for _, name := range ns {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		if n.Role != compose.RoleBroker {
			return fmt.Errorf("%w: cert-expiry: %s is not a broker", ErrBadFault, name)
		}
	}
	f.Resolved = ns
	return nil
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
	sec := env.Cluster.Topology.Security
	admin := sec.Admin()
	admin.AcceptExpired = true
	opts, err := admin.KgoOpts(env.Cluster.Dial())
	if err != nil {
		return fmt.Errorf("cert-expiry: %w", err)
	}
	for _, name := range f.Resolved {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		if err := sec.RenewBroker(n.NodeSpec, v); err != nil {
			return fmt.Errorf("cert-expiry: %w", err)
		}
		cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(n.KafkaAddr()))...)
		if err != nil {
			return fmt.Errorf("cert-expiry: %w", err)
		}
		loc := sec.Keystore(n.NodeSpec)
		rs, err := kadm.NewClient(cl).AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: compose.KeystoreKey, Value: &loc}}, int32(n.ID))
		cl.Close()
		if err == nil && len(rs) > 0 {
			err = rs[0].Err
		}
		if err != nil {
			return fmt.Errorf("cert-expiry: %s (broker %s) reads its keystore: %w", name, strconv.Itoa(n.ID), err)
		}
	}
	return nil
}
