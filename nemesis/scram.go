package nemesis

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func init() { register(func() Fault { return &ScramPassword{} }) }

// ScramPassword changes a SCRAM user's password in a secured cluster (the
// secured preset) to a random one nobody is told, through
// AlterUserScramCredentials as the brokers' admin user, as an operator
// rotating a secret before its clients have the new one: connections
// already authenticated go on until they re-authenticate
// (connections.max.reauth.ms, KIP-368), new ones and re-authentications
// fail. Heal sets the password the run made back. The new password is
// never recorded.
type ScramPassword struct {
	// User is the SCRAM user (default: the lab's clients' user). The
	// brokers' own user cannot be chosen: they authenticate to each
	// other with it, and the heal needs it.
	User string `json:"user,omitempty"`
}

type scramPasswordRun struct {
	ScramPassword `json:"-"`
	// Mechanism is the SCRAM mechanism changed, the cluster's.
	Mechanism string `json:"mechanism,omitempty"`
}

// NewRun implements Fault.
func (f *ScramPassword) NewRun() Run { return &scramPasswordRun{ScramPassword: *f} }

func (*ScramPassword) Kind() string { return "scram-password" }

// Resolve implements Run.
func (f *scramPasswordRun) Resolve(ctx context.Context, env *Env) error {
	sec := env.Cluster.Topology.Security
	if sec == nil {
		return fmt.Errorf("%w: scram-password needs a secured cluster (the secured preset)", ErrUnsupported)
	}
	if f.User == "" {
		f.User = sec.ClientUser
	}
	if f.User == sec.AdminUser {
		return fmt.Errorf("%w: scram-password: %s is the brokers' own user; choose another (the lab's clients are %s)", ErrBadFault, sec.AdminUser, sec.ClientUser)
	}
	if _, err := sec.Password(f.User); err != nil {
		return fmt.Errorf("%w: scram-password: %v", ErrBadFault, err)
	}
	f.Mechanism = sec.Mechanism
	return nil
}

// Inject implements Run.
func (f *scramPasswordRun) Inject(ctx context.Context, env *Env) error {
	b := make([]byte, 24)
	rand.Read(b)
	return f.set(ctx, env, base64.RawURLEncoding.EncodeToString(b))
}

// Heal implements Fault: the password the run made, again.
func (f *scramPasswordRun) Heal(ctx context.Context, env *Env) error {
	sec := env.Cluster.Topology.Security
	if sec == nil {
		return nil
	}
	pw, err := sec.Password(f.User)
	if err != nil {
		return fmt.Errorf("scram-password: %w", err)
	}
	return f.set(ctx, env, pw)
}

// set upserts the user's credential as the admin user.
func (f *scramPasswordRun) set(ctx context.Context, env *Env, password string) error {
	sec := env.Cluster.Topology.Security
	mech := kadm.ScramSha512
	if f.Mechanism == "SCRAM-SHA-256" {
		mech = kadm.ScramSha256
	}
	opts, err := sec.Admin().KgoOpts(env.Cluster.Dial())
	if err != nil {
		return fmt.Errorf("scram-password: %w", err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(env.Cluster.Bootstrap()...))...)
	if err != nil {
		return fmt.Errorf("scram-password: %w", err)
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: f.User, Mechanism: mech, Iterations: 4096, Password: password}})
	if err != nil {
		return fmt.Errorf("scram-password: alter %s: %w", f.User, err)
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("scram-password: alter %s: %w", r.User, r.Err)
		}
	}
	return nil
}
