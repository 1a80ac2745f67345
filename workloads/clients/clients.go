// Package clients holds the client drivers of the workloads other than
// franz-go's (package workloads has that one, the default): sarama and
// segmentio/kafka-go in this process, and exec, an out-of-process driver
// speaking the line-delimited JSON protocol of docs/client-protocol.md, so
// that any client in any language can run the log workload. sarama also
// runs the queue workload (workloads.GroupClient, saramagroup.go) and the
// txn workload (workloads.TxnClient, saramatxn.go), kafka-go the queue
// workload (kafkagogroup.go). librdkafka (through confluent-kafka-python)
// and kafka-python are exec drivers of this package (python/), run with
// the system python3, and kafkajs one (js/), run with the system node;
// an exec driver runs the queue and txn workloads
// when its hello names the protocol's features (execgroup.go,
// exectxn.go).
//
// A driver performs each operation the workload asks for with its client
// and reports ok, fail or info as the client let it know: fail only when
// the record was definitely not written, info when it may have been (a
// timeout, a connection broken after the request was written).
// docs/clients-under-faults.md lists, per client, which of its errors
// mean which.
package clients

import (
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"time"

	"github.com/isrlab/isrlab/kafkaconfig"
	"github.com/isrlab/isrlab/workloads"
)

// The clients a scenario can name (workload.client).
const (
	FranzGo = workloads.FranzGo
	Sarama  = "sarama"
	Exec    = "exec"
)

// Names lists them.
var Names = []string{FranzGo, Sarama, KafkaGo, Librdkafka, KafkaPython, Kafkajs, Exec}

// Env is what a driver needs from the lab: the bootstrap brokers, how the
// lab's clients dial (from the client host's network namespace), and how
// to start an exec driver's command there.
type Env struct {
	Seeds []string
	Dial  workloads.DialFunc
	// RunID names what a driver creates (the Python drivers' scripts).
	RunID string
	// Start starts an exec driver's command (default: cmd.Start, in the
	// lab's own namespace).
	Start func(*exec.Cmd) error
	// SASL authenticates the in-process drivers (sarama, kafka-go) to a
	// secured cluster; Dial then does the TLS handshake. nil: plaintext.
	SASL *SASL
	// Security is how an exec driver's clients connect to a secured
	// cluster (TLS and SASL themselves: Dial is not theirs), given in its
	// hello's security object with the password read from its file, and
	// the protocol's FeatureSecurity asked for. nil: plaintext.
	Security *kafkaconfig.ClientSecurity
	// HangGrace is how long past an operation's own timeout an exec
	// driver may take to complete it before it is taken for hung
	// (default 10 s).
	HangGrace time.Duration
	// DriverLog is the file an exec driver's whole standard error goes
	// to (the password redacted), with the stacks it prints when the
	// lab, finding it hung, sends it SIGQUIT; "" keeps only its last
	// lines, for the errors.
	DriverLog string
}

// Check reports whether the client spec names can run workload kind (log,
// queue, rate, txn; "" is log) with cfg (the queue workload: franz-go and
// sarama; txn: those, librdkafka, kafkajs and exec drivers naming FeatureTxn), and
// whether its settings are
// ones the client has: an error naming the client when not, a
// *workloads.CapabilityError when the client cannot do what cfg asks. It
// needs no cluster: scenarios are checked when they load. The Python
// drivers are asked too (their client's own checks, and whether the
// system python3 has the module).
func Check(spec workloads.ClientSpec, kind string, cfg workloads.Config) error {
	name := spec.Name()
	if !slices.Contains(Names, name) {
		return fmt.Errorf("client %q: use %s", spec.Client, joinOr(Names))
	}
	if len(spec.Exec) > 0 && name != Exec {
		return fmt.Errorf("client %s: exec is the command of client exec", name)
	}
	if name == FranzGo {
		return checkFranzGo(spec.Config, kind, cfg)
	}
	if kind == "" {
		kind = "log"
	}
	if lvl := cfg.IsolationLevel; lvl != "" && !(kind == "txn" && lvl == workloads.ReadCommitted) {
		return &workloads.CapabilityError{Client: name, Reason: fmt.Sprintf(
			"isolation.level is set on franz-go's consumers only; client %s's read with its own default (read_uncommitted, and read_committed in the txn workload)", name)}
	}
	if kind == "queue" {
		return checkQueue(name, spec, cfg)
	}
	if kind == "txn" {
		return checkTxn(name, spec, cfg)
	}
	if kind != "log" {
		return &workloads.CapabilityError{Client: name, Reason: fmt.Sprintf("the %s workload runs on franz-go only (client %s runs the log workload)", kind, name)}
	}
	if cfg.Subscribe {
		return &workloads.CapabilityError{Client: name, Reason: fmt.Sprintf("subscribe (consumer groups) runs on franz-go only; client %s's consumers are assigned their partitions", name)}
	}
	switch name {
	case Sarama:
		_, err := saramaConfig(cfg, spec.Config)
		return err
	case KafkaGo:
		_, _, err := kafkagoConfig(cfg, spec.Config)
		return err
	case Librdkafka, KafkaPython, Kafkajs:
		return checkPython(name, spec, cfg)
	case Exec:
		if len(spec.Exec) == 0 || spec.Exec[0] == "" {
			return errors.New("client exec: exec: give the driver's command as a list, e.g. exec: [python3, driver.py]")
		}
	}
	return nil
}

// New returns the driver spec names for cfg, or nil for franz-go (the
// workloads' own default). Check it first.
func New(spec workloads.ClientSpec, cfg workloads.Config, env Env) (workloads.Client, error) {
	switch spec.Name() {
	case FranzGo:
		return nil, nil
	case Sarama:
		return newSarama(cfg, spec.Config, env)
	case KafkaGo:
		return newKafkaGo(cfg, spec.Config, env)
	case Librdkafka, KafkaPython, Kafkajs:
		return newPython(spec.Name(), cfg, spec, env)
	case Exec:
		return newExec(cfg, spec, env), nil
	}
	return nil, fmt.Errorf("client %q: use %s", spec.Client, joinOr(Names))
}

// QueueClients are the clients that run the queue workload (consumer
// groups), besides exec drivers naming FeatureQueue.
var QueueClients = []string{FranzGo, Sarama, KafkaGo, Librdkafka, KafkaPython, Kafkajs}

// checkQueue checks a client other than franz-go for the queue workload.
// The librdkafka, kafka-python and kafkajs drivers are asked (their hellos name
// FeatureQueue, and each checks the group consumer's configuration); an exec driver
// of the user's is asked when the run starts it, and refused there if
// its hello does not name it.
func checkQueue(name string, spec workloads.ClientSpec, cfg workloads.Config) error {
	switch name {
	case Sarama:
		return checkSaramaGroup(cfg, spec.Config)
	case KafkaGo:
		_, _, err := kafkagoConfig(cfg, spec.Config)
		return err
	case Librdkafka, KafkaPython, Kafkajs:
		return checkPython(name, spec, cfg, FeatureQueue)
	case Exec:
		if len(spec.Exec) == 0 || spec.Exec[0] == "" {
			return errors.New("client exec: exec: give the driver's command as a list, e.g. exec: [python3, driver.py]")
		}
		return nil
	}
	return &workloads.CapabilityError{Client: name, Reason: fmt.Sprintf("the queue workload runs on %s, and on exec drivers that name the protocol's %q feature (client %s has no consumer-group driver; it runs the log workload)", joinOr(QueueClients), FeatureQueue, name)}
}

// checkTxn checks a client other than franz-go for the txn workload.
// Reading in a consumer group (txn.group.id) is franz-go's
// GroupTransactSession and runs there only. The librdkafka and kafkajs
// drivers are asked (their hellos name FeatureTxn, and librdkafka checks
// the transactional producer's configuration); an exec driver of the user's is asked when
// the run starts it, and refused there if its hello does not name it.
func checkTxn(name string, spec workloads.ClientSpec, cfg workloads.Config) error {
	switch name {
	case Sarama:
		return checkSaramaTxn(cfg, spec.Config)
	case KafkaPython:
		return &workloads.CapabilityError{Client: name, Reason: "kafka-python has no transactional producer (KafkaProducer takes no transactional_id); it runs the log workload"}
	case Librdkafka, Kafkajs, Exec:
	default:
		return &workloads.CapabilityError{Client: name, Reason: fmt.Sprintf("the txn workload runs on franz-go and sarama only, and out of process on librdkafka, kafkajs and exec drivers that run transactions (client %s has no transactional driver; it runs the log workload)", name)}
	}
	if cfg.TxnGroup != "" {
		return &workloads.CapabilityError{Client: name, Reason: fmt.Sprintf("txn.group.id (reading in a consumer group, its offsets committed in the transaction) runs on franz-go only; %s runs the txn workload's producer-only and read-process-write transactions", name)}
	}
	if name == Exec {
		if len(spec.Exec) == 0 || spec.Exec[0] == "" {
			return errors.New("client exec: exec: give the driver's command as a list, e.g. exec: [python3, driver.py]")
		}
		return nil
	}
	return checkPython(name, spec, cfg, FeatureTxn)
}

// checkFranzGo refuses settings in franz-go's own names: its settings are
// the workload's Kafka-named keys, and for the queue and txn workloads the
// consumer group protocol (KIP-848) in Kafka's client names; the txn
// workload's group is that of txn.group.id, which group.protocol consumer
// then needs.
func checkFranzGo(own map[string]string, kind string, cfg workloads.Config) error {
	rest := maps.Clone(own)
	if kind == "queue" || kind == "txn" {
		var err error
		if kind == "queue" {
			_, err = workloads.GroupProtocolOpts(own)
		} else {
			_, err = cfg.TxnGroupProtocolOpts(own)
		}
		if err != nil {
			return fmt.Errorf("client franz-go: client.config: %w", err)
		}
		delete(rest, "group.protocol")
		delete(rest, "group.remote.assignor")
	}
	if len(rest) == 0 {
		return nil
	}
	k := slices.Sorted(maps.Keys(rest))[0]
	return fmt.Errorf("client franz-go: client.config.%s: franz-go takes the workload's Kafka-named keys (acks, enable.idempotence, retries, max.in.flight.requests.per.connection, request.timeout, delivery.timeout, linger) and, for the queue and txn workloads, group.protocol and group.remote.assignor; no other client.config", k)
}

func joinOr(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	out := ""
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			out += " or "
		default:
			out += ", "
		}
		out += n
	}
	return out
}
