package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// PartitionState is /brokers/topics/<t>/partitions/<p>/state: who leads a
// partition, in which leader epoch, and its ISR.
type PartitionState struct {
	// ControllerEpoch is the epoch of the controller that last wrote the
	// leader (a leader's own ISR change keeps it).
	ControllerEpoch int64 `json:"controller_epoch"`
	// Leader is the leading broker id, -1 when the partition is offline.
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	ISR         []int32 `json:"isr"`
	// ELR are the eligible leader replicas (KIP-966): replicas out of an
	// ISR below min.insync.replicas that hold everything up to the high
	// watermark. Empty unless eligible.leader.replicas.enable is on.
	ELR []int32 `json:"elr,omitempty"`

	// Version is the key's ModRevision, Kafka's zkVersion: pass it as
	// ExpectedVersion to change the state. Filled in on reads, not stored.
	Version int64 `json:"-"`
}

// stateFormatVersion is the "version" field Kafka writes in the JSON.
const stateFormatVersion = 1

type stateJSON struct {
	Format int `json:"version"`
	PartitionState
}

func encodeState(s PartitionState) (string, error) {
	if s.ISR == nil {
		s.ISR = []int32{}
	}
	b, err := json.Marshal(stateJSON{Format: stateFormatVersion, PartitionState: s})
	return string(b), err
}

func decodeState(val []byte, modRev int64) (PartitionState, error) {
	var s stateJSON
	if err := json.Unmarshal(val, &s); err != nil {
		return PartitionState{}, fmt.Errorf("decode partition state: %w", err)
	}
	s.PartitionState.Version = modRev
	return s.PartitionState, nil
}

// PartitionStateUpdate is one compare-and-swap: write State if the current
// version is ExpectedVersion (0: only if no state exists yet).
type PartitionStateUpdate struct {
	Topic           string
	Partition       int32
	State           PartitionState
	ExpectedVersion int64
}

// PartitionState reads one partition's state with its Version;
// ErrPartitionNotFound when it does not exist.
func (c *Client) PartitionState(ctx context.Context, topic string, partition int32) (PartitionState, error) {
	op := fmt.Sprintf("get partition state %s-%d", topic, partition)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, partitionStateKey(topic, partition))
	if err != nil {
		return PartitionState{}, wrapErr(op, err)
	}
	if len(resp.Kvs) == 0 {
		return PartitionState{}, fmt.Errorf("%s: %w", op, ErrPartitionNotFound)
	}
	st, err := decodeState(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	if err != nil {
		return PartitionState{}, fmt.Errorf("%s: %w", op, err)
	}
	return st, nil
}

// PartitionStates reads every partition state of a topic, by partition.
func (c *Client) PartitionStates(ctx context.Context, topic string) (map[int32]PartitionState, error) {
	op := fmt.Sprintf("get partition states of %s", topic)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, partitionsPrefix(topic), clientv3.WithPrefix())
	if err != nil {
		return nil, wrapErr(op, err)
	}
	out := make(map[int32]PartitionState, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		_, p, ok := parsePartitionStateKey(string(kv.Key))
		if !ok {
			continue
		}
		st, err := decodeState(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out[p] = st
	}
	return out, nil
}

// PartitionStatesOf reads every partition state of each of topics, by
// topic and partition, with one round trip per MaxTxnOps topics (a Txn of
// range reads, each Txn one consistent snapshot), as Kafka's controller
// reads partition states with pipelined ZooKeeper multi-gets. Topics
// without states are absent from the result.
func (c *Client) PartitionStatesOf(ctx context.Context, topics []string) (map[string]map[int32]PartitionState, error) {
	out := make(map[string]map[int32]PartitionState, len(topics))
	for start := 0; start < len(topics); start += MaxTxnOps {
		batch := topics[start:min(start+MaxTxnOps, len(topics))]
		ops := make([]clientv3.Op, len(batch))
		for i, t := range batch {
			ops[i] = clientv3.OpGet(partitionsPrefix(t), clientv3.WithPrefix())
		}
		cctx, cancel := c.callCtx(ctx)
		resp, err := c.cli.Txn(cctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return nil, wrapErr(fmt.Sprintf("get partition states of %d topics", len(topics)), err)
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().Kvs
			if len(kvs) == 0 {
				continue
			}
			states := make(map[int32]PartitionState, len(kvs))
			for _, kv := range kvs {
				_, p, ok := parsePartitionStateKey(string(kv.Key))
				if !ok {
					continue
				}
				st, err := decodeState(kv.Value, kv.ModRevision)
				if err != nil {
					return nil, fmt.Errorf("get partition states of %s: %w", batch[i], err)
				}
				states[p] = st
			}
			out[batch[i]] = states
		}
	}
	return out, nil
}

// SetPartitionStates writes the updates as compare-and-swap Txns and returns
// each partition's new version, in update order.
//
// l fences the write to the controller; pass nil for a partition leader's
// own ISR change (Kafka <= 2.6), which is guarded by the version alone.
// Updates are applied in Txns of at most MaxTxnOps-1 partitions, up to
// maxTxnsInFlight of them at once (pipelined, as Kafka's controller sends
// its ZooKeeper writes asynchronously); each Txn is atomic, the whole call
// is not: when a Txn fails the others stay applied and their versions are
// returned (0 for the partitions of the failed ones). A mismatch is a
// *VersionMismatchError (errors.Is ErrVersionMismatch) naming the first
// failing partition of the first failed Txn; a fenced write fails with
// ErrNotController.
func (c *Client) SetPartitionStates(ctx context.Context, l *Leadership, updates []PartitionStateUpdate) ([]int64, error) {
	versions := make([]int64, len(updates))
	seen := make(map[string]bool, len(updates))
	vals := make([]string, len(updates))
	for i, u := range updates {
		k := partitionStateKey(u.Topic, u.Partition)
		if seen[k] {
			return versions, fmt.Errorf("set partition states: %s-%d given twice", u.Topic, u.Partition)
		}
		seen[k] = true
		v, err := encodeState(u.State)
		if err != nil {
			return versions, fmt.Errorf("set partition states: %w", err)
		}
		vals[i] = v
	}
	const chunk = MaxTxnOps - 1 // room for the controller fence
	n := (len(updates) + chunk - 1) / chunk
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxTxnsInFlight)
	for i := range n {
		start, end := i*chunk, min((i+1)*chunk, len(updates))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rev, err := c.casStates(ctx, l, updates[start:end], vals[start:end])
			if err != nil {
				errs[i] = err
				return
			}
			for j := start; j < end; j++ {
				versions[j] = rev
			}
		}()
	}
	wg.Wait()
	applied := 0
	for _, v := range versions {
		if v != 0 {
			applied++
		}
	}
	for _, err := range errs {
		if err != nil {
			if applied > 0 {
				err = fmt.Errorf("%d of %d applied: %w", applied, len(updates), err)
			}
			return versions, fmt.Errorf("set partition states: %w", err)
		}
	}
	return versions, nil
}

// maxTxnsInFlight bounds the Txns one SetPartitionStates call has in
// flight: enough to fill etcd's proposal pipeline, few enough that a
// large batch does not starve other clients of the coordinator.
const maxTxnsInFlight = 8

// casStates runs one Txn of at most MaxTxnOps-1 updates and returns the
// revision it committed at.
func (c *Client) casStates(ctx context.Context, l *Leadership, ups []PartitionStateUpdate, vals []string) (int64, error) {
	if l != nil && l.over() {
		return 0, l.notController()
	}
	var cmps []clientv3.Cmp
	var puts, gets []clientv3.Op
	if l != nil {
		cmps = append(cmps, l.fence())
		gets = append(gets, clientv3.OpGet(l.key))
	}
	for i, u := range ups {
		k := partitionStateKey(u.Topic, u.Partition)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", u.ExpectedVersion))
		puts = append(puts, clientv3.OpPut(k, vals[i]))
		gets = append(gets, clientv3.OpGet(k))
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).If(cmps...).Then(puts...).Else(gets...).Commit()
	if err != nil {
		return 0, wrapErr("txn", err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	rs := resp.Responses
	if l != nil {
		if l.deposed((*clientv3.GetResponse)(rs[0].GetResponseRange())) {
			return 0, l.notController()
		}
		rs = rs[1:]
	}
	for i, u := range ups {
		var actual int64
		if kvs := rs[i].GetResponseRange().Kvs; len(kvs) > 0 {
			actual = kvs[0].ModRevision
		}
		if actual != u.ExpectedVersion {
			return 0, &VersionMismatchError{Topic: u.Topic, Partition: u.Partition, Expected: u.ExpectedVersion, Actual: actual}
		}
	}
	// The Else reads run at the revision the compares failed at, so one of
	// them differs; this is a safety net.
	return 0, fmt.Errorf("compare failed: %w", ErrVersionMismatch)
}
