// Package controller is the cluster controller: the one broker that won the
// coordinator's controller election elects partition leaders, fences stale
// state with compare-and-swap on the coordinator, and tells brokers with
// LeaderAndIsr, UpdateMetadata and StopReplica, as Kafka's ZooKeeper-era
// controller does (KAFKA-SPEC §1.6, §1.7, §4, §6).
//
// # Decisions and runtime
//
// The decisions are pure functions: elect.go (OfflineElection,
// PreferredElection, ControlledShutdownElection, RemoveFromISR,
// ImbalancedBrokers), assign.go (AssignReplicas), InitialState and
// ValidateAlterPartition, and the per-partition decisions in cluster.go that
// testdata/*.txt exercises as scripts. The runtime is a Controller: Run does
// one term of leadership with one goroutine that owns the cached cluster
// state and handles, one at a time, coordinator watches (brokers, topics),
// timers (ISR change propagation every 2500 ms, leader imbalance checks)
// and the requests that belong to the controller (ElectLeaders,
// ControlledShutdown, AlterPartition), like Kafka's ControllerEventManager.
//
// # I/O contract
//
// Every partition state write is a compare-and-swap on the state's version
// fenced on the controller's Leadership: a deposed controller's write fails
// with coord.ErrNotController and its Run returns. A version mismatch (a
// leader wrote its ISR meanwhile) re-reads the partition and decides again.
// Any other coordinator failure (coord.ErrNoQuorum) leaves the term running
// and schedules a resync: re-read every state, reconcile, re-send.
//
// Requests to brokers go over the Kafka protocol (wire.Client): LeaderAndIsr
// v4, UpdateMetadata v6 and StopReplica v3, with the controller epoch, the
// target's broker epoch and each partition's version as ZkVersion. Each
// live broker incarnation has its own ordered queue, retried with back-off
// until answered; a slow broker delays only its own queue, and the queue is
// dropped when the broker's registration changes. A partition being
// deleted goes out in UpdateMetadata with leader -2 (Kafka's
// LeaderDuringDelete); the topic leaves the coordinator once every replica
// has answered StopReplica(delete), so a deletion waits for a replica whose
// broker is down (Kafka's TopicDeletionManager).
//
// On becoming controller Run reads the live brokers, topics and partition
// states, initializes partitions without state, elects leaders for offline
// ones, and sends UpdateMetadata (all partitions) to every live broker and
// LeaderAndIsr to every live replica.
package controller
