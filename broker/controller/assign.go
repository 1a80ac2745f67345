package controller

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
)

// ErrNotEnoughBrokers: the replication factor exceeds the live brokers.
var ErrNotEnoughBrokers = errors.New("replication factor larger than available brokers")

// AssignReplicas places partitions*rf replicas over brokers the way Kafka
// does without racks (KAFKA-SPEC §10): a random start broker and a random
// shift, followers placed at increasing distances, the shift bumped every
// len(brokers) partitions. rng makes it reproducible.
func AssignReplicas(brokers []int32, partitions int32, rf int16, rng *rand.Rand) (map[int32][]int32, error) {
	n := len(brokers)
	if rf < 1 || int(rf) > n {
		return nil, fmt.Errorf("%w: replication factor %d, %d brokers", ErrNotEnoughBrokers, rf, n)
	}
	b := slices.Clone(brokers)
	slices.Sort(b)
	start := rng.Intn(n)
	shift := rng.Intn(n)
	out := make(map[int32][]int32, partitions)
	for p := 0; p < int(partitions); p++ {
		if p > 0 && p%n == 0 {
			shift++
		}
		first := (p + start) % n
		replicas := []int32{b[first]}
		for j := 1; j < int(rf); j++ {
			replicas = append(replicas, b[replicaIndex(first, shift, j, n)])
		}
		out[int32(p)] = replicas
	}
	return out, nil
}

func replicaIndex(first, shift, j, n int) int {
	s := 1 + (shift+j-1)%(n-1)
	return (first + s) % n
}

// AssignMoreReplicas places the replicas of partitions new partitions
// numbered from startPartition, as Kafka does when partitions are added
// (AdminZkClient.addPartitions): the start index and the shift are both
// the position of the existing partition 0's first replica among the
// sorted brokers, so added partitions continue the existing layout.
func AssignMoreReplicas(brokers []int32, firstReplicaOfP0 int32, startPartition, partitions int32, rf int16) (map[int32][]int32, error) {
	n := len(brokers)
	if rf < 1 || int(rf) > n {
		return nil, fmt.Errorf("%w: replication factor %d, %d brokers", ErrNotEnoughBrokers, rf, n)
	}
	b := slices.Clone(brokers)
	slices.Sort(b)
	start := max(0, slices.IndexFunc(b, func(id int32) bool { return id >= firstReplicaOfP0 }))
	shift := start
	out := make(map[int32][]int32, partitions)
	for p := int(startPartition); p < int(startPartition+partitions); p++ {
		if p > 0 && p%n == 0 {
			shift++
		}
		first := (p + start) % n
		replicas := []int32{b[first]}
		for j := 1; j < int(rf); j++ {
			replicas = append(replicas, b[replicaIndex(first, shift, j, n)])
		}
		out[int32(p)] = replicas
	}
	return out, nil
}
