package nemesis

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/isrlab/isrlab/kproxy"
	"github.com/isrlab/isrlab/units"
)

func init() { register(func() Fault { return &Kafka{} }) }

// Kafka acts on Kafka requests or responses of one API as they pass the
// Kafka proxy in front of each target broker: drop, delay, duplicate,
// answer with an error code, or close the connection, with a
// probability, at most Count times, only for a topic or a transactional
// id. It needs the brokers behind proxies (compose.Options.KafkaProxy;
// the lab puts them there for a scenario with a kafka fault). See package
// kproxy for what each action does.
type Kafka struct {
	Nodes           []string       `json:"nodes"`
	API             string         `json:"api"`
	Direction       string         `json:"direction,omitempty"`
	Action          string         `json:"action"`
	Probability     float64        `json:"probability,omitempty"`
	Count           int            `json:"count,omitempty"`
	Delay           units.Duration `json:"delay,omitempty"`
	Error           string         `json:"error,omitempty"`
	Topic           string         `json:"topic,omitempty"`
	TransactionalID string         `json:"transactional_id,omitempty"`
}

type kafkaRun struct {
	Kafka `json:"-"`
	// The target brokers (resolved), Sockets their proxies' control
	// sockets; RuleID names the rule on every proxy (from the fault's
	// id). Acted counts, per broker, the messages the rule acted on, read
	// when the fault is healed.
	nodesRun
	Sockets map[string]string `json:"sockets,omitempty"`
	RuleID  string            `json:"rule_id,omitempty"`
	Acted   map[string]int64  `json:"acted,omitempty"`
}

// NewRun implements Fault.
func (f *Kafka) NewRun() Run { return &kafkaRun{Kafka: *f} }

func (*Kafka) Kind() string { return "kafka" }

// rule is the proxy rule the fault sets, called id.
func (k *Kafka) rule(id string) kproxy.Rule {
	return kproxy.Rule{ID: id, API: k.API, Direction: k.Direction, Action: k.Action,
		Probability: k.Probability, Count: k.Count, Delay: k.Delay, Error: k.Error,
		Topic: k.Topic, TransactionalID: k.TransactionalID}
}

// Validate implements validator: the rule as the proxy will check it.
func (k *Kafka) Validate() error {
	if err := k.rule("validate").Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadFault, err)
	}
	return nil
}

// Resolve implements Run.
func (k *kafkaRun) Resolve(ctx context.Context, env *Env) error {
	if err := k.Validate(); err != nil {
		return err
	}
	nodes := k.Nodes
	if len(nodes) == 0 {
		nodes = []string{"brokers"}
	}
	ns, err := env.ResolveTargets(ctx, nodes)
	if err != nil {
		return err
	}
	k.Sockets, k.Resolved = map[string]string{}, ns
	for _, n := range ns {
		s := env.Proxies[n]
		if s == "" {
			return fmt.Errorf("%w: kafka: %s is not behind a Kafka proxy (a scenario with a kafka fault gets one in front of every broker; `isrlab up --kafka-proxy` for a cluster of your own)", ErrUnsupported, n)
		}
		k.Sockets[n] = s
	}
	k.RuleID = "fault-" + env.id
	return nil
}

// Inject implements Run.
func (k *kafkaRun) Inject(ctx context.Context, env *Env) error {
	r := k.rule(k.RuleID)
	for n, s := range k.Sockets {
		if err := kproxy.NewClient(s).Set(ctx, r); err != nil {
			return fmt.Errorf("kafka: proxy of %s: %w", n, err)
		}
	}
	return nil
}

// Heal implements Run: it reads how often the rule acted, then removes
// it from every proxy. A proxy that is gone (its cluster is down) has
// nothing to heal.
func (k *kafkaRun) Heal(ctx context.Context, env *Env) error {
	for n, s := range k.Sockets {
		c := kproxy.NewClient(s)
		if st, err := c.Status(ctx); err == nil {
			for _, r := range st.Rules {
				if r.ID == k.RuleID {
					if k.Acted == nil {
						k.Acted = map[string]int64{}
					}
					k.Acted[n] = r.Acted
				}
			}
		}
		if err := c.Clear(ctx, k.RuleID); err != nil && !proxyGone(err) {
			return fmt.Errorf("kafka: proxy of %s: %w", n, err)
		}
	}
	return nil
}

// proxyGone reports an error from a proxy's control socket that means the
// proxy is not there any more: its socket is removed or nobody listens.
func proxyGone(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}
