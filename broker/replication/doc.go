// Package replication is the broker's replication machinery beside the
// partition state machine (broker/partition): the replica fetchers
// (num.replica.fetchers per leader) that bring a follower's log to a
// prefix of its leader's and fetch from there, the leader's incremental
// fetch sessions (KIP-227), the high-watermark checkpoint and the periodic
// replica tasks (ISR expiration, the stalled-follower check).
//
// It works on *partition.Partition; what it needs from the broker (where
// a leader listens, the local replicas, the replica gauges) is the Broker
// interface, and its settings are a Config read from the broker config.
package replication
