package broker

import (
	"context"
	"errors"
	"regexp"

	"github.com/isrlab/isrlab/broker/config"
	klog "github.com/isrlab/isrlab/broker/log"
	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/broker/wire"
)

// apiVersions is the one table that drives ApiVersions and is enforced on
// every request. Versions start where record batches are v2 (magic 2) and
// stop before topic IDs replace topic names.
var apiVersions = wire.Table{
	0:  {Min: 3, Max: 9},  // Produce
	1:  {Min: 4, Max: 12}, // Fetch
	2:  {Min: 1, Max: 6},  // ListOffsets
	3:  {Min: 0, Max: 9},  // Metadata
	4:  {Min: 1, Max: 4},  // LeaderAndIsr
	5:  {Min: 1, Max: 3},  // StopReplica
	6:  {Min: 1, Max: 6},  // UpdateMetadata
	7:  {Min: 1, Max: 3},  // ControlledShutdown
	8:  {Min: 0, Max: 8},  // OffsetCommit
	9:  {Min: 0, Max: 8},  // OffsetFetch
	10: {Min: 0, Max: 4},  // FindCoordinator
	11: {Min: 0, Max: 9},  // JoinGroup
	12: {Min: 0, Max: 4},  // Heartbeat
	13: {Min: 0, Max: 5},  // LeaveGroup
	14: {Min: 0, Max: 5},  // SyncGroup
	15: {Min: 0, Max: 5},  // DescribeGroups
	16: {Min: 0, Max: 4},  // ListGroups
	18: {Min: 0, Max: 3},  // ApiVersions
	19: {Min: 0, Max: 5},  // CreateTopics
	20: {Min: 0, Max: 5},  // DeleteTopics
	22: {Min: 0, Max: 4},  // InitProducerId
	23: {Min: 0, Max: 4},  // OffsetForLeaderEpoch
	32: {Min: 0, Max: 4},  // DescribeConfigs
	42: {Min: 0, Max: 2},  // DeleteGroups
	43: {Min: 0, Max: 2},  // ElectLeaders
	44: {Min: 0, Max: 1},  // IncrementalAlterConfigs
	47: {Min: 0, Max: 0},  // OffsetDelete
	56: {Min: 0, Max: 1},  // AlterPartition
}

func (b *Broker) handlerTable() map[int16]handler {
	return map[int16]handler{
		0:  b.handleProduce,
		1:  b.handleFetch,
		2:  b.handleListOffsets,
		3:  b.handleMetadata,
		4:  b.handleLeaderAndISR,
		5:  b.handleStopReplica,
		6:  b.handleUpdateMetadata,
		7:  b.handleControlledShutdown,
		8:  b.handleOffsetCommit,
		9:  b.handleOffsetFetch,
		10: b.handleFindCoordinator,
		11: b.handleJoinGroup,
		12: b.handleHeartbeat,
		13: b.handleLeaveGroup,
		14: b.handleSyncGroup,
		15: b.handleDescribeGroups,
		16: b.handleListGroups,
		18: b.handleApiVersions,
		19: b.handleCreateTopics,
		20: b.handleDeleteTopics,
		22: b.handleInitProducerID,
		23: b.handleOffsetForLeaderEpoch,
		32: b.handleDescribeConfigs,
		42: b.handleDeleteGroups,
		43: b.handleElectLeaders,
		44: b.handleIncrementalAlterConfigs,
		47: b.handleOffsetDelete,
		56: b.handleAlterPartition,
	}
}

var (
	errTopicExists  = errors.New("topic exists")
	errUnknownTopic = errors.New("unknown topic")
)

var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// validTopicName applies Kafka's topic name rules.
func validTopicName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 249 && legalTopic.MatchString(name)
}

func partitionConfig(tc *config.Config) partition.Config {
	return partition.Config{
		MinInsyncReplicas: tc.Int("min.insync.replicas"),
		MaxMessageBytes:   tc.Int("max.message.bytes"),
	}
}

func tpKey(topic string, p int32) klog.TopicPartition {
	return klog.TopicPartition{Topic: topic, Partition: p}
}

func (b *Broker) handleApiVersions(_ context.Context, rq *request) {
	rq.respond(b.versions.ApiVersions(rq.hdr.Version))
}
