package kafkaconfig

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Update modes of a dynamic broker config (Kafka's
// DynamicBrokerConfig.dynamicConfigUpdateModes).
const (
	ClusterWide = "cluster-wide" // per broker or as the cluster-wide default
	PerBroker   = "per-broker"   // only per broker (resource name = broker id)
)

// Kafka37DynamicBrokerConfigs is every broker config Kafka 3.7 lets
// IncrementalAlterConfigs and AlterConfigs change on a BROKER resource
// (DynamicBrokerConfig.AllDynamicConfigs with DynamicConfig.Broker's
// replication throttles), with its update mode. Left out: the SSL and
// SASL keys, which Kafka accepts only with a listener.name.<l>. prefix
// and isrlab reads only at start (docs/security.md).
//
// Source, at the 3.7.1 tag: LogCleaner.ReconfigurableConfigs,
// DynamicLogConfig.ReconfigurableConfigs (the broker names of the topic
// configs, ServerTopicConfigSynonyms, without log.message.format.version),
// DynamicThreadPool, DynamicListenerConfig, SocketServer,
// ProducerStateManagerConfig and DynamicRemoteLogConfig's
// ReconfigurableConfigs, metric.reporters, and DynamicConfig.Broker.
var Kafka37DynamicBrokerConfigs = map[string]string{
	// LogCleaner
	"log.cleaner.threads": ClusterWide, "log.cleaner.dedupe.buffer.size": ClusterWide,
	"log.cleaner.io.buffer.load.factor": ClusterWide, "log.cleaner.io.buffer.size": ClusterWide,
	"log.cleaner.io.max.bytes.per.second": ClusterWide, "log.cleaner.backoff.ms": ClusterWide,
	// DynamicLogConfig: the topic configs' broker defaults
	"log.segment.bytes": ClusterWide, "log.roll.ms": ClusterWide, "log.roll.jitter.ms": ClusterWide,
	"log.index.size.max.bytes": ClusterWide, "log.flush.interval.messages": ClusterWide,
	"log.flush.interval.ms": ClusterWide, "log.retention.bytes": ClusterWide, "log.retention.ms": ClusterWide,
	"message.max.bytes": ClusterWide, "log.index.interval.bytes": ClusterWide,
	"log.cleaner.delete.retention.ms": ClusterWide, "log.cleaner.min.compaction.lag.ms": ClusterWide,
	"log.cleaner.max.compaction.lag.ms": ClusterWide, "log.segment.delete.delay.ms": ClusterWide,
	"log.cleaner.min.cleanable.ratio": ClusterWide, "log.cleanup.policy": ClusterWide,
	"unclean.leader.election.enable": ClusterWide, "min.insync.replicas": ClusterWide,
	"compression.type": ClusterWide, "log.preallocate": ClusterWide, "log.message.timestamp.type": ClusterWide,
	"log.message.timestamp.difference.max.ms": ClusterWide, "log.message.timestamp.before.max.ms": ClusterWide,
	"log.message.timestamp.after.max.ms": ClusterWide, "log.message.downconversion.enable": ClusterWide,
	"log.local.retention.ms": ClusterWide, "log.local.retention.bytes": ClusterWide,
	// DynamicThreadPool
	"num.io.threads": ClusterWide, "num.network.threads": ClusterWide, "num.replica.fetchers": ClusterWide,
	"num.recovery.threads.per.data.dir": ClusterWide, "background.threads": ClusterWide,
	"metric.reporters": ClusterWide,
	// DynamicListenerConfig
	"listeners": PerBroker, "advertised.listeners": PerBroker, "listener.security.protocol.map": PerBroker,
	// SocketServer
	"max.connections.per.ip": ClusterWide, "max.connections.per.ip.overrides": ClusterWide,
	"max.connections": ClusterWide, "max.connection.creation.rate": ClusterWide,
	// ProducerStateManagerConfig
	"producer.id.expiration.ms": ClusterWide, "transaction.partition.verification.enable": ClusterWide,
	// DynamicRemoteLogConfig
	"remote.log.index.file.cache.total.size.bytes": ClusterWide,
	// DynamicConfig.Broker: the replication throttles
	"leader.replication.throttled.rate": ClusterWide, "follower.replication.throttled.rate": ClusterWide,
	"replica.alter.log.dirs.io.max.bytes.per.second": ClusterWide,
}

// DynamicOnlyBrokerConfigs are the dynamic broker keys that have no
// static form (DynamicConfig.Broker's own, not KafkaConfig's): all longs.
var DynamicOnlyBrokerConfigs = []string{
	"follower.replication.throttled.rate", "leader.replication.throttled.rate",
	"replica.alter.log.dirs.io.max.bytes.per.second",
}

// kafkaTypes maps every Kafka 3.7 broker key to its type.
var kafkaTypes = func() map[string]string {
	m := map[string]string{}
	for _, d := range Kafka37BrokerDefaults {
		m[d.Name] = d.Type
	}
	for _, k := range DynamicOnlyBrokerConfigs {
		m[k] = "long"
	}
	return m
}()

// ValidateDynamicBrokerConfigs checks the dynamic configs of one broker
// (perBroker) or of the cluster-wide default as Kafka's
// DynamicBrokerConfig.validateConfigs does: every key must be one Kafka
// updates dynamically, a per-broker key needs a broker id, and each value
// must parse as its type (and, for isrlab's own keys, pass its checks).
// Keys neither Kafka nor isrlab define are refused too (Kafka's ZooKeeper
// mode would store them). The error says which keys and why.
func (c *Config) ValidateDynamicBrokerConfigs(configs map[string]string, perBroker bool) error {
	var static, perBrokerOnly, unknown []string
	for k := range configs {
		mode, dynamic := Kafka37DynamicBrokerConfigs[k]
		if _, ok := ListenerKeystoreKey(k); ok {
			mode, dynamic = PerBroker, true
		}
		_, kafka := kafkaTypes[k]
		switch {
		case dynamic && mode == PerBroker && !perBroker:
			perBrokerOnly = append(perBrokerOnly, k)
		case dynamic:
		case kafka || c.Known(k):
			static = append(static, k)
		default:
			unknown = append(unknown, k)
		}
	}
	list := func(ks []string) string { sort.Strings(ks); return strings.Join(ks, ", ") }
	switch {
	case len(unknown) > 0:
		return fmt.Errorf("unknown broker configs: %s", list(unknown))
	case len(static) > 0:
		return fmt.Errorf("cannot update these configs dynamically: %s", list(static))
	case len(perBrokerOnly) > 0:
		return fmt.Errorf("cannot update these configs at default cluster level, broker id must be specified: %s", list(perBrokerOnly))
	}
	keys := make([]string, 0, len(configs))
	for k := range configs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := configs[k]
		if d, ok := c.defs[k]; ok {
			if err := d.validate(v); err != nil {
				return err
			}
			continue
		}
		if _, ok := ListenerKeystoreKey(k); ok {
			if v == "" {
				return fmt.Errorf("%s: a keystore location is required", k)
			}
			continue // the broker reads the keystore itself
		}
		if err := validateKafkaType(k, kafkaTypes[k], v); err != nil {
			return err
		}
	}
	return nil
}

func validateKafkaType(k, typ, v string) error {
	v = strings.TrimSpace(v)
	var err error
	switch typ {
	case "int":
		_, err = strconv.ParseInt(v, 10, 32)
	case "short":
		_, err = strconv.ParseInt(v, 10, 16)
	case "long":
		_, err = strconv.ParseInt(v, 10, 64)
	case "double":
		_, err = strconv.ParseFloat(v, 64)
	case "boolean":
		if !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
			err = fmt.Errorf("expected true or false")
		}
	}
	if err != nil {
		return &InvalidError{Key: k, Value: v, Reason: "not a " + typ}
	}
	return nil
}

// KafkaType is the type Kafka 3.7 gives a broker key ("" if none).
func KafkaType(k string) string { return kafkaTypes[k] }

// KafkaDefaultValue is Kafka 3.7's default of a broker key ("" if none).
func KafkaDefaultValue(k string) string {
	for _, d := range Kafka37BrokerDefaults {
		if d.Name == k {
			return d.Default
		}
	}
	return ""
}

// ListenerKeystoreKey reports whether key is listener.name.<l>.ssl.keystore.location,
// the one SSL key isrlab applies dynamically (per broker, as Kafka
// reconfigures a listener's keystore), and names the listener.
func ListenerKeystoreKey(key string) (listener string, ok bool) {
	rest, ok := strings.CutPrefix(key, "listener.name.")
	if !ok {
		return "", false
	}
	l, ok := strings.CutSuffix(rest, ".ssl.keystore.location")
	return l, ok && l != "" && !strings.Contains(l, ".")
}
