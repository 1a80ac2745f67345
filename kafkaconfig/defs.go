package kafkaconfig

import (
	"math"
	"strconv"
)

var maxLong = strconv.FormatInt(math.MaxInt64, 10)

// BrokerDefs are the broker keys isrlab understands, with Kafka's defaults.
var BrokerDefs = []Def{
	{Name: "broker.id", Type: Int, Default: "0", Min: min(0), Doc: "The broker's id."},
	{Name: "listeners", Type: List, Default: "PLAINTEXT://127.0.0.1:9092", Doc: "Listener URIs the broker binds to."},
	{Name: "advertised.listeners", Type: List, Default: "", Doc: "Listener URIs published to clients; defaults to listeners."},
	{Name: "log.dirs", Type: List, Default: "", Doc: "Directories holding the log data."},
	{Name: "log.dir", Type: List, Default: "/tmp/kafka-logs", Doc: "Used when log.dirs is not set."},
	{Name: "num.partitions", Type: Int, Default: "1", Min: min(1), Doc: "Default partition count of auto-created topics."},
	{Name: "default.replication.factor", Type: Int, Default: "1", Min: min(1), Doc: "Default replication factor of auto-created topics."},
	{Name: "auto.create.topics.enable", Type: Bool, Default: "true", Doc: "Create a topic on first metadata request or produce."},
	{Name: "delete.topic.enable", Type: Bool, Default: "true", Doc: "Allow topic deletion."},
	{Name: "log.segment.bytes", Type: Int, Default: "1073741824", Min: min(14), Doc: "Maximum size of one segment file."},
	{Name: "log.roll.ms", Type: Long, Default: "", Doc: "Maximum age of a segment before it rolls (overrides log.roll.hours)."},
	{Name: "log.roll.hours", Type: Int, Default: "168", Min: min(1), Doc: "Maximum age of a segment in hours."},
	{Name: "log.retention.ms", Type: Long, Default: "", Doc: "Retention time (overrides minutes and hours); -1 keeps forever."},
	{Name: "log.retention.minutes", Type: Int, Default: "", Doc: "Retention time in minutes (overrides hours)."},
	{Name: "log.retention.hours", Type: Int, Default: "168", Doc: "Retention time in hours."},
	{Name: "log.retention.bytes", Type: Long, Default: "-1", Doc: "Maximum partition size before old segments are deleted; -1 is no limit."},
	{Name: "log.retention.check.interval.ms", Type: Long, Default: "300000", Min: min(1), Doc: "How often retention runs."},
	{Name: "log.segment.delete.delay.ms", Type: Long, Default: "60000", Min: min(0), Doc: "Delay before a deleted segment's files are removed."},
	{Name: "log.index.size.max.bytes", Type: Int, Default: "10485760", Min: min(4), Doc: "Preallocated size of an offset index."},
	{Name: "log.index.interval.bytes", Type: Int, Default: "4096", Min: min(0), Doc: "Bytes between offset index entries."},
	{Name: "log.flush.interval.messages", Type: Long, Default: maxLong, Min: min(1), Doc: "Messages accumulated before a forced fsync."},
	{Name: "log.flush.interval.ms", Type: Long, Default: "", Doc: "Maximum time a message stays unflushed; unset means never by time."},
	{Name: "log.flush.scheduler.interval.ms", Type: Long, Default: maxLong, Doc: "How often the flusher checks log.flush.interval.ms."},
	{Name: "log.flush.offset.checkpoint.interval.ms", Type: Int, Default: "60000", Min: min(0), Doc: "How often the recovery point is checkpointed."},
	{Name: "log.flush.start.offset.checkpoint.interval.ms", Type: Int, Default: "60000", Min: min(0), Doc: "How often the log start offset is checkpointed."},
	{Name: "log.message.timestamp.type", Type: String, Default: "CreateTime", OneOf: []string{"CreateTime", "LogAppendTime"}, Doc: "Timestamp stored with each message."},
	{Name: "log.message.downconversion.enable", Type: Bool, Default: "true", Doc: "Fetches before v4 get the stored v2 batches down-converted to message format v0/v1; false answers them with UNSUPPORTED_VERSION."},
	{Name: "num.network.threads", Type: Int, Default: "3", Min: min(1), Doc: "Threads accepting connections and reading requests."},
	{Name: "num.io.threads", Type: Int, Default: "8", Min: min(1), Doc: "Request handler threads."},
	{Name: "queued.max.requests", Type: Int, Default: "500", Min: min(1), Doc: "Requests queued for the handler threads before network threads block."},
	{Name: "socket.request.max.bytes", Type: Int, Default: "104857600", Min: min(1), Doc: "Largest request frame accepted."},
	{Name: "socket.send.buffer.bytes", Type: Int, Default: "102400", Doc: "SO_SNDBUF; -1 uses the OS default."},
	{Name: "socket.receive.buffer.bytes", Type: Int, Default: "102400", Doc: "SO_RCVBUF; -1 uses the OS default."},
	{Name: "message.max.bytes", Type: Int, Default: "1048588", Min: min(0), Doc: "Largest record batch accepted."},
	{Name: "compression.type", Type: String, Default: "producer", OneOf: []string{"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"}, Doc: "Final compression of a topic's data (only 'producer' is applied: batches are stored as sent)."},
	{Name: "metrics.listen", Type: String, Default: "", Doc: "host:port of the Prometheus /metrics endpoint; empty disables it."},
	{Name: "group.initial.rebalance.delay.ms", Type: Int, Default: "3000", Min: min(0), Doc: "Delay of the first rebalance of an empty group."},
	{Name: "offsets.topic.num.partitions", Type: Int, Default: "50", Min: min(1), Doc: "Partitions of __consumer_offsets."},
	{Name: "offsets.topic.replication.factor", Type: Int, Default: "3", Min: min(1), Doc: "Replication factor of __consumer_offsets."},
	{Name: "offsets.commit.timeout.ms", Type: Int, Default: "5000", Min: min(1), Doc: "Timeout of an offset commit's replicated append."},
	{Name: "offsets.retention.minutes", Type: Int, Default: "10080", Min: min(1), Doc: "How long committed offsets of an empty group are kept."},
	{Name: "offsets.retention.check.interval.ms", Type: Long, Default: "600000", Min: min(1), Doc: "How often expired offsets are removed."},
	{Name: "group.min.session.timeout.ms", Type: Int, Default: "6000", Min: min(0), Doc: "Smallest session.timeout.ms a consumer may ask for."},
	{Name: "group.consumer.session.timeout.ms", Type: Int, Default: "45000", Min: min(1), Doc: "How long a consumer group member of the consumer protocol (KIP-848) may go without a heartbeat before the coordinator removes it and reassigns its partitions."},
	{Name: "group.consumer.heartbeat.interval.ms", Type: Int, Default: "5000", Min: min(1), Doc: "The heartbeat interval the coordinator tells consumer-protocol members (KIP-848)."},
	{Name: "group.coordinator.rebalance.protocols", Type: List, Default: "classic", Doc: "Group protocols the group coordinator serves: classic, or classic,consumer for KIP-848 consumer groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe); unknown names are ignored."},
	{Name: "group.max.session.timeout.ms", Type: Int, Default: "1800000", Min: min(0), Doc: "Largest session.timeout.ms a consumer may ask for."},
	{Name: "transactional.id.expiration.ms", Type: Int, Default: "604800000", Min: min(1), Doc: "How long a transactional id without a transaction is kept after its last update before the transaction coordinator removes it."},
	{Name: "transaction.state.log.num.partitions", Type: Int, Default: "50", Min: min(1), Doc: "Partitions of __transaction_state."},
	{Name: "transaction.state.log.replication.factor", Type: Int, Default: "3", Min: min(1), Doc: "Replication factor of __transaction_state (fewer replicas, with a warning, while fewer brokers are live)."},
	{Name: "transaction.state.log.min.isr", Type: Int, Default: "2", Min: min(1), Doc: "min.insync.replicas of __transaction_state (at most its replication factor)."},
	{Name: "transaction.state.log.segment.bytes", Type: Int, Default: "104857600", Min: min(1), Doc: "Segment size of __transaction_state."},
	{Name: "transaction.max.timeout.ms", Type: Int, Default: "900000", Min: min(1), Doc: "Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above it)."},
	{Name: "transaction.abort.timed.out.transaction.cleanup.interval.ms", Type: Int, Default: "10000", Min: min(1), Doc: "How often the transaction coordinator aborts transactions older than their timeout."},
	{Name: "transaction.remove.expired.transaction.cleanup.interval.ms", Type: Int, Default: "3600000", Min: min(1), Doc: "How often the transaction coordinator removes expired transactional ids."},
	// Replication and the coordinator.
	{Name: "coordinator.connect", Type: List, Default: "", Doc: "Coordinator client URLs; empty runs the broker standalone."},
	{Name: "coordinator.session.timeout.ms", Type: Int, Default: "18000", Min: min(1), Doc: "Coordinator session timeout (the ZooKeeper era's zookeeper.session.timeout.ms: a broker whose session lapses is dead to the controller)."},
	{Name: "process.roles", Type: String, Default: "", OneOf: []string{"", "broker"}, Doc: "KRaft mode (Kafka 4, the 4.0 profile's default): broker makes this a KRaft broker, which runs no controller and registers and heartbeats with the controller quorum (controller.quorum.voters, played by the coordinator nodes) instead of holding a coordinator session. Empty is the ZooKeeper era: a broker may win the controller election. Default from kafka.profile."},
	{Name: "controller.quorum.voters", Type: List, Default: "", Doc: "The controller quorum's nodes as id@host:port (KRaft mode): the coordinator nodes' controller listeners, which a KRaft broker sends BrokerRegistration, BrokerHeartbeat, AlterPartition and the forwarded admin requests to."},
	{Name: "broker.heartbeat.interval.ms", Type: Int, Default: "2000", Min: min(1), Doc: "How often a KRaft broker sends BrokerHeartbeat to the active controller (Kafka's default 2000)."},
	{Name: "broker.session.timeout.ms", Type: Int, Default: "9000", Min: min(1), Doc: "How long the active controller waits for a KRaft broker's heartbeat before it fences the broker (its leaderships move, it leaves every ISR; Kafka's default 9000)."},
	{Name: "min.insync.replicas", Type: Int, Default: "1", Min: min(1), Doc: "Minimum ISR size for acks=all writes."},
	{Name: "unclean.leader.election.enable", Type: Bool, Default: "false", Doc: "Allow out-of-sync replicas to become leader."},
	{Name: "unclean.leader.election.interval.ms", Type: Long, Default: "300000", Min: min(1), Doc: "KRaft mode: how often the active controller elects leaders from outside the ISR for leaderless partitions of topics with unclean.leader.election.enable (Kafka 4.0's internal setting, default 5 minutes): enabling it dynamically takes effect at the next check, not at once as in the ZooKeeper era. ElectLeaders (UNCLEAN) elects at once."},
	{Name: "replica.lag.time.max.ms", Type: Long, Default: "30000", Min: min(1), Doc: "Time a follower may lag before it leaves the ISR."},
	{Name: "max.incremental.fetch.session.cache.slots", Type: Int, Default: "1000", Min: min(0), Doc: "Incremental fetch sessions (KIP-227) the broker keeps."},
	{Name: "replica.fetch.wait.max.ms", Type: Int, Default: "500", Min: min(0), Doc: "Follower fetch long-poll time."},
	{Name: "replica.fetch.min.bytes", Type: Int, Default: "1", Min: min(1), Doc: "Follower fetch minimum bytes."},
	{Name: "replica.fetch.max.bytes", Type: Int, Default: "1048576", Min: min(0), Doc: "Follower fetch bytes per partition."},
	{Name: "replica.fetch.response.max.bytes", Type: Int, Default: "10485760", Min: min(0), Doc: "Follower fetch bytes per response."},
	{Name: "replica.fetch.backoff.ms", Type: Int, Default: "1000", Min: min(0), Doc: "Back-off after a follower fetch error."},
	{Name: "replica.high.watermark.checkpoint.interval.ms", Type: Long, Default: "5000", Min: min(1), Doc: "How often follower HWs are checkpointed."},
	{Name: "num.replica.fetchers", Type: Int, Default: "1", Min: min(1), Doc: "Fetcher threads per source broker."},
	{Name: "controlled.shutdown.enable", Type: Bool, Default: "true", Doc: "Move leaderships away before shutting down."},
	{Name: "controlled.shutdown.max.retries", Type: Int, Default: "3", Min: min(0), Doc: "Controlled shutdown attempts."},
	{Name: "controlled.shutdown.retry.backoff.ms", Type: Long, Default: "5000", Min: min(0), Doc: "Back-off between controlled shutdown attempts."},
	{Name: "auto.leader.rebalance.enable", Type: Bool, Default: "true", Doc: "Move leadership back to preferred replicas."},
	{Name: "leader.imbalance.per.broker.percentage", Type: Int, Default: "10", Min: min(0), Doc: "Imbalance that triggers a rebalance."},
	{Name: "leader.imbalance.check.interval.seconds", Type: Long, Default: "300", Min: min(1), Doc: "How often imbalance is checked."},
	// Security (docs/security.md): listeners with TLS and SASL.
	{Name: "listener.security.protocol.map", Type: String, Default: "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", Doc: "Listener name to security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), as NAME:PROTOCOL pairs."},
	{Name: "inter.broker.listener.name", Type: String, Default: "", Doc: "Listener the brokers use between themselves (replica fetchers, the controller's requests); empty: the one security.inter.broker.protocol names."},
	{Name: "security.inter.broker.protocol", Type: String, Default: "PLAINTEXT", OneOf: []string{"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}, Doc: "Security protocol between brokers when inter.broker.listener.name is not set."},
	{Name: "ssl.keystore.type", Type: String, Default: "PEM", OneOf: []string{"PEM"}, Doc: "Only PEM keystores (Kafka's ssl.keystore.type=PEM)."},
	{Name: "ssl.keystore.location", Type: String, Default: "", Doc: "PEM file holding the private key and the certificate chain."},
	{Name: "ssl.keystore.certificate.chain", Type: Password, Default: "", Doc: "The certificate chain as PEM text (instead of ssl.keystore.location)."},
	{Name: "ssl.keystore.key", Type: Password, Default: "", Doc: "The private key as PEM text (instead of ssl.keystore.location)."},
	{Name: "ssl.key.password", Type: Password, Default: "", Doc: "Password of an encrypted private key (only legacy PEM encryption is read)."},
	{Name: "ssl.truststore.type", Type: String, Default: "PEM", OneOf: []string{"PEM"}, Doc: "Only PEM truststores."},
	{Name: "ssl.truststore.location", Type: String, Default: "", Doc: "PEM file of trusted CA certificates: clients' certificates are checked against it (ssl.client.auth) and so are other brokers'."},
	{Name: "ssl.truststore.certificates", Type: Password, Default: "", Doc: "Trusted CA certificates as PEM text (instead of ssl.truststore.location)."},
	{Name: "ssl.client.auth", Type: String, Default: "none", OneOf: []string{"none", "requested", "required"}, Doc: "Client certificates on SSL and SASL_SSL listeners: none, requested (checked when given) or required (mutual TLS)."},
	{Name: "ssl.endpoint.identification.algorithm", Type: String, Default: "https", OneOf: []string{"https", ""}, Doc: "https: a broker connecting to another checks the host name against the certificate; empty: it does not."},
	{Name: "sasl.enabled.mechanisms", Type: List, Default: "GSSAPI", Doc: "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI, Kafka's default, is not served)."},
	{Name: "sasl.mechanism.inter.broker.protocol", Type: String, Default: "GSSAPI", Doc: "Mechanism a broker uses on a SASL inter-broker listener; its credentials are the username and password of that listener's sasl.jaas.config for the mechanism."},
	{Name: "sasl.jaas.config", Type: Password, Default: "", Doc: "JAAS login module line, read as Kafka's PlainLoginModule and ScramLoginModule are: username/password are this broker's own credentials, user_<name>=\"<password>\" are PLAIN users. Usually set per listener and mechanism (listener.name.<l>.<mechanism>.sasl.jaas.config)."},
	{Name: "sasl.server.max.receive.size", Type: Int, Default: "524288", Min: min(1), Doc: "Largest frame accepted before a SASL connection has authenticated."},
	{Name: "connections.max.reauth.ms", Type: Long, Default: "0", Min: min(0), Doc: "Lifetime of a SASL session (KIP-368): told to clients in SaslAuthenticate, which re-authenticate before it ends; a connection whose session ended is closed at its next request. 0: sessions do not expire."},
	{Name: "config.providers", Type: List, Default: "", Doc: "Config providers (KIP-297) whose ${name:path:key} references are replaced when the config is read; only FileConfigProvider is known."},
	{Name: "config.providers.file.class", Type: String, Default: "", OneOf: []string{"", FileConfigProvider}, Doc: "Class of the provider named file: " + FileConfigProvider + ", which reads key from the properties file at path."},
	{Name: "test.hooks.enable", Type: Bool, Default: "false", Doc: "Tests only: serve /v1/testhooks on metrics.listen, through which a test holds or delays chosen requests before they are handled (broker/testhook.go)."},
	{Name: "kafka.profile", Type: String, Default: "3.7", OneOf: []string{"0.10", "2.4", "2.6", "3.7", "4.0"}, Doc: "Kafka era whose replication behaviour and defaults the broker reproduces (4.0: KRaft mode, the controller quorum on the coordinator nodes)."},
	{Name: "replication.truncation", Type: String, Default: "", OneOf: []string{"", "hw", "epoch", "diverging-epoch-fetch"}, Doc: "Follower truncation rule (default from kafka.profile)."},
	{Name: "isr.update", Type: String, Default: "", OneOf: []string{"", "sync-under-lock-always", "sync-under-lock-checked", "async-alter-partition"}, Doc: "How the leader writes ISR changes (default from kafka.profile)."},
	{Name: "isr.expand-needs-epoch-start", Type: String, Default: "", OneOf: []string{"", "true", "false"}, Doc: "Expansion also needs the follower past the leader epoch start (default from kafka.profile)."},
	{Name: "fetch.leader-epoch-fencing", Type: String, Default: "", OneOf: []string{"", "true", "false"}, Doc: "Followers send their current leader epoch in Fetch, OffsetForLeaderEpoch and ListOffsets, so a deposed leader fences them (KIP-320; default from kafka.profile)."},
	{Name: "hw.requires-min-isr", Type: String, Default: "", OneOf: []string{"", "true", "false"}, Doc: "HW does not advance below min ISR (default from kafka.profile)."},
	{Name: "eligible.leader.replicas.enable", Type: String, Default: "", OneOf: []string{"", "true", "false"}, Doc: "Eligible leader replicas (KIP-966 part 1: Kafka 4.0's eligible.leader.replicas.enable, 4.1's feature eligible.leader.replicas.version=1, on by default for new 4.1 clusters): while a partition's ISR is below min.insync.replicas, the replicas that left it join its ELR (they hold everything up to the high watermark, which cannot advance); when no ISR member is live the controller elects a live ELR member instead of leaving the partition offline; a broker that restarts after an unclean shutdown leaves every ELR; an unclean election empties it. Needs isr.update=async-alter-partition and hw.requires-min-isr=true. Default from kafka.profile: false for every profile modelled so far."},
	{Name: "transaction.partition.verification.enable", Type: String, Default: "", OneOf: []string{"", "true", "false"}, Doc: "A partition leader asks the transaction coordinator (AddPartitionsToTxn v4, verify only) whether the partition is in the producer's transaction before appending a batch that opens one, and refuses it with INVALID_TXN_STATE if not (KIP-890 part 1, Kafka 3.6+). Off, a late write after an abort opens a transaction nobody ends and pins the last stable offset. Default from kafka.profile: true for 3.7, false before."},
	{Name: "add.partitions.to.txn.retry.backoff.ms", Type: Int, Default: "20", Min: min(1), Doc: "Under transaction.version 2, how long a partition leader waits before asking the transaction coordinator again when the implicit add of a produce request's partition met CONCURRENT_TRANSACTIONS (the previous transaction's markers still being written), as Kafka 4.0 does."},
	{Name: "add.partitions.to.txn.retry.backoff.max.ms", Type: Int, Default: "100", Min: min(0), Doc: "How long, in all, a partition leader retries that add before answering the producer."},
	{Name: "transaction.version", Type: String, Default: "0", OneOf: []string{"0", "1", "2"}, Doc: "Kafka 4.0's transaction.version feature, finalized in ApiVersions (kafka.profile 3.7, where it defaults to 0, and 4.0, where it defaults to 2 as on a new 4.0 cluster): 1 writes TransactionLogValue v1 and advertises the transaction APIs' 4.0 versions (Produce v12, EndTxn v5, TxnOffsetCommit v5); 2 adds KIP-890 part 2: EndTxn v5 bumps the producer epoch of every transaction, so a late write of a finished transaction is fenced, and Produce v12 and TxnOffsetCommit v5 add their partitions to the transaction through the leader (needs transaction.partition.verification.enable=true). 0 is Kafka 3.7's protocol."},
}

// TopicDefs are the topic-level keys. Each defaults to a broker key (see
// TopicToBroker); their Default here is only used without a broker config.
var TopicDefs = []Def{
	{Name: "cleanup.policy", Type: String, Default: "delete", OneOf: []string{"delete"}, Doc: "Only delete is supported."},
	{Name: "segment.bytes", Type: Int, Default: "1073741824", Min: min(14)},
	{Name: "segment.ms", Type: Long, Default: "604800000", Min: min(1)},
	{Name: "segment.index.bytes", Type: Int, Default: "10485760", Min: min(4)},
	{Name: "index.interval.bytes", Type: Int, Default: "4096", Min: min(0)},
	{Name: "retention.ms", Type: Long, Default: "604800000", Min: min(-1)},
	{Name: "retention.bytes", Type: Long, Default: "-1"},
	{Name: "flush.messages", Type: Long, Default: maxLong, Min: min(1)},
	{Name: "flush.ms", Type: Long, Default: maxLong, Min: min(0)},
	{Name: "file.delete.delay.ms", Type: Long, Default: "60000", Min: min(0)},
	{Name: "max.message.bytes", Type: Int, Default: "1048588", Min: min(0)},
	{Name: "min.insync.replicas", Type: Int, Default: "1", Min: min(1)},
	{Name: "unclean.leader.election.enable", Type: Bool, Default: "false"},
	{Name: "message.timestamp.type", Type: String, Default: "CreateTime", OneOf: []string{"CreateTime", "LogAppendTime"}},
	{Name: "compression.type", Type: String, Default: "producer", OneOf: []string{"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"}},
	{Name: "message.downconversion.enable", Type: Bool, Default: "true"},
}

// TopicToBroker maps a topic key to the broker key holding its default.
var TopicToBroker = map[string]string{
	"segment.bytes":                  "log.segment.bytes",
	"segment.ms":                     "log.roll.ms",
	"segment.index.bytes":            "log.index.size.max.bytes",
	"index.interval.bytes":           "log.index.interval.bytes",
	"retention.ms":                   "log.retention.ms",
	"retention.bytes":                "log.retention.bytes",
	"flush.messages":                 "log.flush.interval.messages",
	"flush.ms":                       "log.flush.interval.ms",
	"file.delete.delay.ms":           "log.segment.delete.delay.ms",
	"max.message.bytes":              "message.max.bytes",
	"min.insync.replicas":            "min.insync.replicas",
	"unclean.leader.election.enable": "unclean.leader.election.enable",
	"message.timestamp.type":         "log.message.timestamp.type",
	"compression.type":               "compression.type",
	"message.downconversion.enable":  "log.message.downconversion.enable",
}

// RetentionMs resolves log.retention.ms > minutes > hours as Kafka does.
func (c *Config) RetentionMs() int64 {
	if c.String("log.retention.ms") != "" {
		return c.Long("log.retention.ms")
	}
	if c.String("log.retention.minutes") != "" {
		return c.Long("log.retention.minutes") * 60 * 1000
	}
	h := c.Long("log.retention.hours")
	if h < 0 {
		return -1
	}
	return h * 3600 * 1000
}

// RollMs resolves log.roll.ms > log.roll.hours.
func (c *Config) RollMs() int64 {
	if c.String("log.roll.ms") != "" {
		return c.Long("log.roll.ms")
	}
	return c.Long("log.roll.hours") * 3600 * 1000
}

// FlushMs resolves log.flush.interval.ms, which defaults to never.
func (c *Config) FlushMs() int64 {
	if c.String("log.flush.interval.ms") != "" {
		return c.Long("log.flush.interval.ms")
	}
	return math.MaxInt64
}

// TopicDefaults returns the topic-level config implied by the broker config.
func (c *Config) TopicDefaults() *Config {
	t := New(TopicDefs)
	for tk, bk := range TopicToBroker {
		var v string
		switch bk {
		case "log.retention.ms":
			v = strconv.FormatInt(c.RetentionMs(), 10)
		case "log.roll.ms":
			v = strconv.FormatInt(c.RollMs(), 10)
		case "log.flush.interval.ms":
			v = strconv.FormatInt(c.FlushMs(), 10)
		default:
			v = c.String(bk)
		}
		t.values[tk] = v
	}
	return t
}

// TopicConfig applies topic-level overrides to the broker's topic defaults.
// An unknown key or invalid value is an error naming it.
func (c *Config) TopicConfig(overrides map[string]string) (*Config, error) {
	t := c.TopicDefaults()
	for k, v := range overrides {
		if err := t.Set(k, v); err != nil {
			return nil, err
		}
	}
	return t, nil
}
