package coord

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TopicSpec is a topic's replica assignment and configs.
type TopicSpec struct {
	Name string
	// ID is the topic ID (KIP-516), assigned once at creation; zero for a
	// topic written before topic IDs existed.
	ID [16]byte
	// Assignment maps partition -> replicas in preference order (the first
	// is the preferred leader). Partitions are 0..n-1.
	Assignment map[int32][]int32
	// Configs are topic-level overrides with Kafka's names
	// ("min.insync.replicas", "unclean.leader.election.enable", ...).
	Configs map[string]string
	// Adding and Removing are the replicas a reassignment in progress adds
	// to and removes from each partition (KIP-455: Kafka 2.4+ keeps them in
	// /brokers/topics/<t> as adding_replicas and removing_replicas, so a new
	// controller resumes the reassignment). Assignment then holds the full
	// replica set, target and origin. Empty when nothing moves.
	Adding, Removing map[int32][]int32
	// MarkedForDeletion is true while /admin/delete_topics/<t> exists.
	MarkedForDeletion bool
	// Version is the ModRevision of /brokers/topics/<t> (reads only).
	Version int64
}

// Partitions returns the partition ids in order.
func (t TopicSpec) Partitions() []int32 {
	ps := make([]int32, 0, len(t.Assignment))
	for p := range t.Assignment {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

// topicJSON is Kafka's /brokers/topics/<t> format: version 2 (Kafka 2.4+)
// adds adding_replicas and removing_replicas, written while a reassignment
// is in progress; version 3 (Kafka 2.8+) carries the topic ID and always
// writes both maps, empty when nothing moves.
type topicJSON struct {
	Version          int                 `json:"version"`
	TopicID          string              `json:"topic_id,omitempty"`
	Partitions       map[string][]int32  `json:"partitions"`
	AddingReplicas   *map[string][]int32 `json:"adding_replicas,omitempty"`
	RemovingReplicas *map[string][]int32 `json:"removing_replicas,omitempty"`
}

// NewTopicID returns a random topic ID that is neither the zero ID nor
// Kafka's reserved metadata topic ID (1), like Kafka's Uuid.randomUuid.
func NewTopicID() [16]byte {
	for {
		var id [16]byte
		rand.Read(id[:])
		if id != ([16]byte{}) && id != ([16]byte{15: 1}) {
			return id
		}
	}
}

// FormatTopicID writes a topic ID as Kafka does: URL-safe base64 without
// padding.
func FormatTopicID(id [16]byte) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// ParseTopicID reads FormatTopicID's form.
func ParseTopicID(s string) ([16]byte, error) {
	var id [16]byte
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		return id, fmt.Errorf("topic id %q is not 16 bytes of URL-safe base64", s)
	}
	copy(id[:], b)
	return id, nil
}

func encodeTopicSpec(spec TopicSpec) (string, error) {
	byName := func(m map[int32][]int32) map[string][]int32 {
		out := make(map[string][]int32, len(m))
		for p, rs := range m {
			if len(rs) > 0 {
				out[strconv.FormatInt(int64(p), 10)] = rs
			}
		}
		return out
	}
	tj := topicJSON{Version: 1, Partitions: byName(spec.Assignment)}
	add, rm := byName(spec.Adding), byName(spec.Removing)
	if len(add) > 0 || len(rm) > 0 {
		tj.Version, tj.AddingReplicas, tj.RemovingReplicas = 2, &add, &rm
	}
	if spec.ID != ([16]byte{}) {
		tj.Version, tj.TopicID, tj.AddingReplicas, tj.RemovingReplicas = 3, FormatTopicID(spec.ID), &add, &rm
	}
	b, err := json.Marshal(tj)
	return string(b), err
}

func decodeTopic(name string, val []byte) (TopicSpec, error) {
	var tj topicJSON
	if err := json.Unmarshal(val, &tj); err != nil {
		return TopicSpec{}, fmt.Errorf("decode topic %s: %w", name, err)
	}
	spec := TopicSpec{Name: name, Assignment: make(map[int32][]int32, len(tj.Partitions))}
	if tj.TopicID != "" {
		id, err := ParseTopicID(tj.TopicID)
		if err != nil {
			return TopicSpec{}, fmt.Errorf("decode topic %s: %w", name, err)
		}
		spec.ID = id
	}
	for ps, rs := range tj.Partitions {
		p, err := strconv.ParseInt(ps, 10, 32)
		if err != nil {
			return TopicSpec{}, fmt.Errorf("decode topic %s: partition %q: %w", name, ps, err)
		}
		spec.Assignment[int32(p)] = rs
	}
	deref := func(m *map[string][]int32) map[string][]int32 {
		if m == nil {
			return nil
		}
		return *m
	}
	for field, m := range map[string]map[string][]int32{"adding_replicas": deref(tj.AddingReplicas), "removing_replicas": deref(tj.RemovingReplicas)} {
		for ps, rs := range m {
			p, err := strconv.ParseInt(ps, 10, 32)
			if err != nil || len(rs) == 0 {
				continue
			}
			if _, ok := spec.Assignment[int32(p)]; !ok {
				return TopicSpec{}, fmt.Errorf("decode topic %s: %s for unassigned partition %s", name, field, ps)
			}
			if field == "adding_replicas" {
				if spec.Adding == nil {
					spec.Adding = map[int32][]int32{}
				}
				spec.Adding[int32(p)] = rs
			} else {
				if spec.Removing == nil {
					spec.Removing = map[int32][]int32{}
				}
				spec.Removing[int32(p)] = rs
			}
		}
	}
	return spec, nil
}

func decodeConfigs(val []byte) (map[string]string, error) {
	cfg := map[string]string{}
	if len(val) == 0 {
		return cfg, nil
	}
	if err := json.Unmarshal(val, &cfg); err != nil {
		return nil, fmt.Errorf("decode topic configs: %w", err)
	}
	return cfg, nil
}

// validateSpec checks the name and that partitions are 0..n-1, each with
// distinct replicas.
func validateSpec(spec TopicSpec, initial map[int32]PartitionState) error {
	if err := ValidateTopicName(spec.Name); err != nil {
		return err
	}
	n := int32(len(spec.Assignment))
	if n == 0 {
		return fmt.Errorf("%w: %s has no partitions", ErrInvalidTopic, spec.Name)
	}
	for p, rs := range spec.Assignment {
		if p < 0 || p >= n {
			return fmt.Errorf("%w: %s partitions must be 0..%d, found %d", ErrInvalidTopic, spec.Name, n-1, p)
		}
		if len(rs) == 0 {
			return fmt.Errorf("%w: %s-%d has no replicas", ErrInvalidTopic, spec.Name, p)
		}
		seen := map[int32]bool{}
		for _, r := range rs {
			if seen[r] {
				return fmt.Errorf("%w: %s-%d lists replica %d twice", ErrInvalidTopic, spec.Name, p, r)
			}
			seen[r] = true
		}
	}
	for p := range initial {
		if _, ok := spec.Assignment[p]; !ok {
			return fmt.Errorf("%w: initial state for %s-%d, which is not assigned", ErrInvalidTopic, spec.Name, p)
		}
	}
	return nil
}

// CreateTopic writes the assignment, the topic ID (a new one when spec.ID
// is zero), the configs and initialStates in one
// Txn when they fit (MaxTxnOps), fenced on l. With more than MaxTxnOps-3
// initial states the rest follow in further fenced Txns, as a Kafka
// controller creates partition states after the topic znode. l may be nil
// for an admin-style create that only writes the assignment and configs
// (pass no initial states then; the controller creates them). Returns
// ErrTopicExists, ErrNotController or ErrInvalidTopic.
func (c *Client) CreateTopic(ctx context.Context, l *Leadership, spec TopicSpec, initialStates map[int32]PartitionState) error {
	op := fmt.Sprintf("create topic %s", spec.Name)
	if err := validateSpec(spec, initialStates); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if spec.ID == ([16]byte{}) {
		spec.ID = NewTopicID()
	}
	tval, err := encodeTopicSpec(spec)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	cfg := spec.Configs
	if cfg == nil {
		cfg = map[string]string{}
	}
	cval, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	ps := make([]int32, 0, len(initialStates))
	for p := range initialStates {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	updates := make([]PartitionStateUpdate, len(ps))
	for i, p := range ps {
		updates[i] = PartitionStateUpdate{Topic: spec.Name, Partition: p, State: initialStates[p]}
	}
	// First Txn: fence + topic-absent compares; the topic, its configs and
	// as many states as fit, minus one put for the delete marker's removal.
	first := min(len(updates), MaxTxnOps-3)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(topicKey(spec.Name)), "=", 0)}
	var elses []clientv3.Op
	if l != nil {
		if l.over() {
			return fmt.Errorf("%s: %w", op, l.notController())
		}
		cmps = append([]clientv3.Cmp{l.fence()}, cmps...)
		elses = append(elses, clientv3.OpGet(l.key))
	}
	puts := []clientv3.Op{
		clientv3.OpPut(topicKey(spec.Name), tval),
		clientv3.OpPut(topicConfigKey(spec.Name), string(cval)),
		// A stale deletion marker must not delete the new topic.
		clientv3.OpDelete(deleteTopicKey(spec.Name)),
	}
	for _, u := range updates[:first] {
		v, err := encodeState(u.State)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		puts = append(puts, clientv3.OpPut(partitionStateKey(u.Topic, u.Partition), v))
	}
	cctx, cancel := c.callCtx(ctx)
	resp, err := c.cli.Txn(cctx).If(cmps...).Then(puts...).Else(elses...).Commit()
	cancel()
	if err != nil {
		return wrapErr(op, err)
	}
	if !resp.Succeeded {
		if l != nil && l.deposed((*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())) {
			return fmt.Errorf("%s: %w", op, l.notController())
		}
		return fmt.Errorf("%s: %w", op, ErrTopicExists)
	}
	if first < len(updates) {
		if _, err := c.SetPartitionStates(ctx, l, updates[first:]); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	return nil
}

// Topic reads one topic's assignment, configs and deletion mark;
// ErrTopicNotFound when it does not exist.
func (c *Client) Topic(ctx context.Context, name string) (TopicSpec, error) {
	op := fmt.Sprintf("get topic %s", name)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).Then(
		clientv3.OpGet(topicKey(name)),
		clientv3.OpGet(topicConfigKey(name)),
		clientv3.OpGet(deleteTopicKey(name)),
	).Commit()
	if err != nil {
		return TopicSpec{}, wrapErr(op, err)
	}
	tk := resp.Responses[0].GetResponseRange().Kvs
	if len(tk) == 0 {
		return TopicSpec{}, fmt.Errorf("%s: %w", op, ErrTopicNotFound)
	}
	spec, err := decodeTopic(name, tk[0].Value)
	if err != nil {
		return TopicSpec{}, err
	}
	spec.Version = tk[0].ModRevision
	spec.Configs = map[string]string{}
	if ck := resp.Responses[1].GetResponseRange().Kvs; len(ck) > 0 {
		if spec.Configs, err = decodeConfigs(ck[0].Value); err != nil {
			return TopicSpec{}, fmt.Errorf("%s: %w", op, err)
		}
	}
	spec.MarkedForDeletion = len(resp.Responses[2].GetResponseRange().Kvs) > 0
	return spec, nil
}

// Topics lists every topic sorted by name.
func (c *Client) Topics(ctx context.Context) ([]TopicSpec, error) {
	ev, _, err := c.topics(ctx)
	return ev.Topics, err
}

// TopicsEvent is a snapshot of all topics at Revision.
type TopicsEvent struct {
	Topics   []TopicSpec
	Revision int64
}

func (c *Client) topics(ctx context.Context) (TopicsEvent, int64, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	// Partition states live under the topic prefix; reading them too is
	// cheap at lab scale and keeps the snapshot in one consistent Txn.
	resp, err := c.cli.Txn(cctx).Then(
		clientv3.OpGet(topicsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(topicConfigPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(deleteTopicsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return TopicsEvent{}, 0, wrapErr("list topics", err)
	}
	var out []TopicSpec
	idx := map[string]int{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		name, ok := topicFromKey(string(kv.Key))
		if !ok {
			continue
		}
		spec, err := decodeTopic(name, kv.Value)
		if err != nil {
			return TopicsEvent{}, 0, err
		}
		spec.Version = kv.ModRevision
		spec.Configs = map[string]string{}
		idx[name] = len(out)
		out = append(out, spec)
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		name := strings.TrimPrefix(string(kv.Key), topicConfigPrefix)
		if i, ok := idx[name]; ok {
			cfg, err := decodeConfigs(kv.Value)
			if err != nil {
				return TopicsEvent{}, 0, fmt.Errorf("list topics: %s: %w", name, err)
			}
			out[i].Configs = cfg
		}
	}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		if i, ok := idx[strings.TrimPrefix(string(kv.Key), deleteTopicsPrefix)]; ok {
			out[i].MarkedForDeletion = true
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return TopicsEvent{Topics: out, Revision: resp.Header.Revision}, resp.Header.Revision, nil
}

// WatchTopics delivers a snapshot of all topics at once and a fresh one
// after every topic creation, deletion, config change or deletion mark
// (partition state changes do not trigger it). Latest-wins; closes when ctx
// ends or the client closes.
func (c *Client) WatchTopics(ctx context.Context) <-chan TopicsEvent {
	relevant := func(ev *clientv3.Event) bool {
		k := string(ev.Kv.Key)
		if strings.HasPrefix(k, topicsPrefix) {
			_, ok := topicFromKey(k)
			return ok
		}
		return true
	}
	return watchSnapshots(c, ctx, "watch topics",
		[]string{topicsPrefix, topicConfigPrefix, deleteTopicsPrefix}, relevant, c.topics,
		func(a, b TopicsEvent) bool { return reflect.DeepEqual(a.Topics, b.Topics) })
}

// TopicConfig reads a topic's config overrides.
func (c *Client) TopicConfig(ctx context.Context, topic string) (map[string]string, error) {
	spec, err := c.Topic(ctx, topic)
	if err != nil {
		return nil, err
	}
	return spec.Configs, nil
}

// SetTopicConfig replaces a topic's config overrides (as kafka-configs
// --alter does). l fences it to the controller; nil is an admin write.
func (c *Client) SetTopicConfig(ctx context.Context, l *Leadership, topic string, configs map[string]string) error {
	op := fmt.Sprintf("set config of topic %s", topic)
	if configs == nil {
		configs = map[string]string{}
	}
	val, err := json.Marshal(configs)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return c.fencedTopicTxn(ctx, op, l, topic, clientv3.OpPut(topicConfigKey(topic), string(val)))
}

// MarkTopicForDeletion creates /admin/delete_topics/<t> (kafka-topics
// --delete); the controller deletes the topic. ErrTopicNotFound if absent.
func (c *Client) MarkTopicForDeletion(ctx context.Context, topic string) error {
	return c.fencedTopicTxn(ctx, fmt.Sprintf("mark topic %s for deletion", topic), nil, topic,
		clientv3.OpPut(deleteTopicKey(topic), ""))
}

// PendingDeletions lists topics marked for deletion, sorted.
func (c *Client) PendingDeletions(ctx context.Context) ([]string, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, deleteTopicsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, wrapErr("list pending topic deletions", err)
	}
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, strings.TrimPrefix(string(kv.Key), deleteTopicsPrefix))
	}
	sort.Strings(out)
	return out, nil
}

// DeleteTopic removes the topic, its partition states, its configs and its
// deletion mark in one Txn fenced on l (required).
func (c *Client) DeleteTopic(ctx context.Context, l *Leadership, topic string) error {
	op := fmt.Sprintf("delete topic %s", topic)
	if l == nil {
		return fmt.Errorf("%s: %w: no leadership given", op, ErrNotController)
	}
	return c.fencedTopicTxn(ctx, op, l, topic,
		clientv3.OpDelete(topicKey(topic)),
		clientv3.OpDelete(topicKey(topic)+"/", clientv3.WithPrefix()),
		clientv3.OpDelete(topicConfigKey(topic)),
		clientv3.OpDelete(deleteTopicKey(topic)),
	)
}

// fencedTopicTxn runs ops if the topic exists and, when l is not nil, l is
// still the controller.
func (c *Client) fencedTopicTxn(ctx context.Context, op string, l *Leadership, topic string, ops ...clientv3.Op) error {
	if err := ValidateTopicName(topic); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(topicKey(topic)), ">", 0)}
	var elses []clientv3.Op
	if l != nil {
		if l.over() {
			return fmt.Errorf("%s: %w", op, l.notController())
		}
		cmps = append([]clientv3.Cmp{l.fence()}, cmps...)
		elses = append(elses, clientv3.OpGet(l.key))
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).If(cmps...).Then(ops...).Else(elses...).Commit()
	if err != nil {
		return wrapErr(op, err)
	}
	if !resp.Succeeded {
		if l != nil && l.deposed((*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())) {
			return fmt.Errorf("%s: %w", op, l.notController())
		}
		return fmt.Errorf("%s: %w", op, ErrTopicNotFound)
	}
	return nil
}
