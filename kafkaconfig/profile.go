package kafkaconfig

import "maps"

// Profile is one Kafka era's replication behaviour and defaults
// (KAFKA-SPEC, "Compatibility switches"). kafka.profile picks one; each key
// can still be set alone and wins over the profile.
type Profile struct {
	Name     string
	Defaults map[string]string
}

// Profiles are the eras isrlab reproduces.
var Profiles = map[string]Profile{
	"0.10": {Name: "0.10", Defaults: map[string]string{
		"fetch.leader-epoch-fencing":                "false",
		"replication.truncation":                    "hw",
		"isr.update":                                "sync-under-lock-always",
		"isr.expand-needs-epoch-start":              "false",
		"hw.requires-min-isr":                       "false",
		"eligible.leader.replicas.enable":           "false",
		"replica.lag.time.max.ms":                   "10000",
		"coordinator.session.timeout.ms":            "6000",
		"transaction.partition.verification.enable": "false",
		"unclean.leader.election.enable":            "true",
	}},
	"2.4": {Name: "2.4", Defaults: map[string]string{
		"fetch.leader-epoch-fencing":                "true",
		"replication.truncation":                    "epoch",
		"isr.update":                                "sync-under-lock-always",
		"isr.expand-needs-epoch-start":              "true",
		"hw.requires-min-isr":                       "false",
		"eligible.leader.replicas.enable":           "false",
		"replica.lag.time.max.ms":                   "10000",
		"coordinator.session.timeout.ms":            "6000",
		"transaction.partition.verification.enable": "false",
		"unclean.leader.election.enable":            "false",
	}},
	"2.6": {Name: "2.6", Defaults: map[string]string{
		"fetch.leader-epoch-fencing":                "true",
		"replication.truncation":                    "epoch",
		"isr.update":                                "sync-under-lock-checked",
		"isr.expand-needs-epoch-start":              "true",
		"hw.requires-min-isr":                       "false",
		"eligible.leader.replicas.enable":           "false",
		"replica.lag.time.max.ms":                   "30000",
		"coordinator.session.timeout.ms":            "18000",
		"transaction.partition.verification.enable": "false",
		"unclean.leader.election.enable":            "false",
	}},
	"3.7": {Name: "3.7", Defaults: map[string]string{
		"fetch.leader-epoch-fencing":                "true",
		"replication.truncation":                    "diverging-epoch-fetch",
		"isr.update":                                "async-alter-partition",
		"isr.expand-needs-epoch-start":              "true",
		"hw.requires-min-isr":                       "true",
		"eligible.leader.replicas.enable":           "false",
		"replica.lag.time.max.ms":                   "30000",
		"coordinator.session.timeout.ms":            "18000",
		"transaction.partition.verification.enable": "true",
		"unclean.leader.election.enable":            "false",
	}},
}

func init() {
	// 4.0 is KRaft mode as in apache/kafka trunk at 1eb7644 (4.0.0-SNAPSHOT,
	// October 2024, ZooKeeper mode removed): the controller is a quorum,
	// not a broker, and a broker's liveness is its heartbeats
	// (BrokerHeartbeatManager, broker.session.timeout.ms 9000), not a
	// session. Replication is 3.7's; eligible leader replicas stay off
	// (4.0's eligible.leader.replicas.enable default false); the group
	// coordinator serves the consumer group protocol (KIP-848) beside the
	// classic one, as 4.0 does by default; the transaction protocol is
	// KIP-890's.
	p := Profile{Name: "4.0", Defaults: maps.Clone(Profiles["3.7"].Defaults)}
	p.Defaults["process.roles"] = "broker"
	p.Defaults["group.coordinator.rebalance.protocols"] = "classic,consumer"
	// A new 4.0 cluster finalizes transaction.version 2 (its bootstrap
	// metadata version, 4.0-IV2, enables KIP-890's second part).
	p.Defaults["transaction.version"] = "2"
	Profiles[p.Name] = p
}

// applyProfile fills every key the user did not set from kafka.profile.
func (c *Config) applyProfile() {
	p, ok := Profiles[c.String("kafka.profile")]
	if !ok {
		return
	}
	for k, v := range p.Defaults {
		if !c.set[k] {
			c.values[k] = v
		}
	}
}
