// Package coord is isrlab's coordinator: an embedded etcd server (Server) and
// a small typed client (Client) that gives brokers and the controller the
// ZooKeeper data model Kafka used up to 2.8 (KAFKA-SPEC §6).
//
// # Key layout
//
// Every key lives under a chroot, "/isrlab" by default (WithChroot changes
// it), exactly as a Kafka cluster may live under a ZooKeeper chroot. Relative
// to the chroot:
//
//	/brokers/ids/<id>                          BrokerInfo JSON, on the broker's lease
//	/controller/<lease-hex>                    etcd election keys; the oldest leads
//	/brokers/topics/<t>                        {"partitions":{"0":[1,2,3],...}}
//	/brokers/topics/<t>/partitions/<p>/state   PartitionState JSON
//	/config/topics/<t>                         topic-level configs, JSON map
//	/config/brokers/<id>, /config/brokers/<default>  dynamic broker configs, {"version":1,"config":{...}}
//	/admin/delete_topics/<t>                   pending topic deletion marker
//	/isr_change_notification/isr_change_<seq>  partitions whose ISR a leader changed
//	/latest_producer_id_block                  {"version":1,"broker":B,"block_start":"S","block_end":"E"}
//
// Brokers reserve producer ids in blocks of ProducerIDBlockSize by a
// compare-and-swap on /latest_producer_id_block (ReserveProducerIDs), so no
// two brokers of a cluster hand out the same id.
//
// # Epochs and versions
//
// The broker epoch (KIP-380) is the CreateRevision of /brokers/ids/<id>; a
// re-registration after a lost session always gets a larger one. The
// controller epoch is the CreateRevision of the winning election key (the
// oldest candidate key under /controller/). The version of a partition
// state (Kafka's zkVersion) is the key's ModRevision. All three are etcd
// revisions: they increase strictly over the life of a coordinator cluster
// (they fit Kafka's int32 epochs for any lab run).
//
// # Fencing
//
// Every write that takes a *Leadership is a Txn whose first condition is that
// the controller's election key still exists with the create revision it
// was elected with. A deposed controller's writes therefore fail with
// ErrNotController even if it does not know yet that it was deposed. Once
// its Leadership has ended (Done closed) such writes fail without a round
// trip.
//
// # Timeouts
//
// etcd reports a lost quorum only as a deadline, so every call applies the
// client's call timeout (WithCallTimeout, 5 s by default) when ctx has no
// deadline, and a missing leader or an expired deadline is reported as
// ErrNoQuorum (which also matches context.DeadlineExceeded when that was the
// cause). Campaign is the exception: it blocks until elected or ctx ends,
// waiting through coordinator outages.
//
// # Failover between members
//
// Dial with every member's URL. Requests carry WithRequireLeader, so a
// member cut off from the quorum refuses them at once; reads are retried by
// etcd's client and writes by this package (a refused write was never
// proposed, so retrying is safe) on the next member, round robin. Watches
// on such a member end and are reopened. Sessions are renewed by one short
// call every third of the session timeout, each bounded by that third, so a
// renewal stuck on a paused or cut-off member is retried on another member
// in time: a 6 s session (Kafka 2.4) survives a paused etcd leader, where
// etcd's own keepalive stream would wait out its 7 s request timeout. A
// session whose renewals cannot reach a quorum for its whole timeout ends
// (Registration.Done, Leadership.Done).
//
// # Background work
//
// Watch* methods, sessions and a Leadership each run one goroutine owned by
// the Client: it ends with its ctx (or Close, Resign) and Client.Close
// waits for it. Snapshot reads everything at one revision for tools and run
// records; Members, AddMember and RemoveMember change the membership.
package coord
