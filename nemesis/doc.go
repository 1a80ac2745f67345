// Package nemesis injects and heals faults in a running isrlab cluster:
// process faults (kill, graceful stop, pause, restart, power loss), network
// partitions and flaky links (nftables rules in the switch namespace's
// bridge), bandwidth limits (TBF through netlink), packet delay and jitter
// (netem where the kernel has it, else a userspace NFQUEUE delayer), and
// disk faults through faultfs control sockets, and membership changes
// (reassign: partition replicas moved between brokers through the Kafka
// API, moved back on heal).
//
// Each fault is a small struct whose JSON tags are its schema (Kind names
// it). Targets are expressions resolved at injection time against live
// metadata: a node name ("b2"), "leader:topic/0", "follower:topic/0",
// "last-isr:topic/0", "followers:topic/0" (every replica but the leader),
// "non-replicas:topic/0" (every broker outside its replica set),
// "controller", "coordinator-leader", or a group
// ("brokers", "coordinators", "clients", "all"). Resolve fixes them into node
// names stored in the fault, so a fault written to the cluster's state
// directory is healed by another process on exactly the nodes it hit.
//
// A Nemesis applies faults to one cluster, records every injection and heal
// as history operations (process nemesis, f start-<kind>, stop-<kind> or
// heal, value = the resolved fault) and keeps the active set in a Store.
// Heal is idempotent; HealAll heals everything the store knows.
//
// Schedules (Fixed, Every, Once) are pure seeded generators: the same seed
// gives the same list of events, with no clock and no sleeping. Run applies
// a schedule with a real clock.
//
// Everything a fault creates carries the run id: nftables tables are named
// isrlab-<run>-<fault id>, so Clean removes every leftover of a run.
package nemesis
