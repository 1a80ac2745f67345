package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/partition"
)

// topicMeta is what the broker knows about one topic.
type topicMeta struct {
	Name       string            `json:"name"`
	ID         [16]byte          `json:"id"`
	Configs    map[string]string `json:"configs,omitempty"`
	Partitions []partitionMeta   `json:"partitions"`
}

// partitionMeta is one partition's leadership as the broker last heard it.
type partitionMeta struct {
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	Offline     []int32 `json:"-"`
}

// brokerEndpoint is a live broker: Host and Port are its inter-broker
// listener's address, Endpoints every advertised listener's by name (nil
// when only Host and Port are known).
type brokerEndpoint struct {
	ID        int32
	Host      string
	Port      int32
	Rack      *string
	Endpoints map[string]hostPort
}

// on returns the broker as a client of listener sees it: that
// listener's address, or false when the broker has no such listener
// (Kafka leaves such brokers out of its answers).
func (e brokerEndpoint) on(listener string) (brokerEndpoint, bool) {
	if e.Endpoints == nil || listener == "" {
		return e, true
	}
	hp, ok := e.Endpoints[listener]
	if !ok {
		return e, false
	}
	e.Host, e.Port = hp.Host, hp.Port
	return e, true
}

// metadata is the broker's metadata cache. Standalone (no
// coordinator.connect) the broker is its own controller and persists the
// topic list in log.dirs[0]/isrlab-topics.json.
type metadata struct {
	b    *Broker
	path string

	mu         sync.RWMutex
	brokers    map[int32]brokerEndpoint
	controller int32
	topics     map[string]*topicMeta
	byID       map[[16]byte]string          // topic ID -> name, for requests that name topics by ID
	configs    map[string]map[string]string // clustered: topic configs seen before the topic
	change     chan struct{}                // closed at the next change of topics or partitions
}

// changed returns a channel closed at the cache's next change of a topic
// or partition, for requests that answer once their change is visible.
func (m *metadata) changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.change == nil {
		m.change = make(chan struct{})
	}
	return m.change
}

func (m *metadata) notifyLocked() {
	if m.change != nil {
		close(m.change)
		m.change = nil
	}
}

// await waits until cond holds on the cache or ctx ends; it reports
// whether cond held.
func (m *metadata) await(ctx context.Context, cond func() bool) bool {
	for {
		ch := m.changed()
		if cond() {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return cond()
		}
	}
}

// online reports whether topic is cached with at least n partitions, each
// with a leader.
func (m *metadata) online(topic string, n int32) bool {
	t, ok := m.topic(topic)
	if !ok || int32(len(t.Partitions)) < n {
		return false
	}
	for _, p := range t.Partitions {
		if p.Leader < 0 {
			return false
		}
	}
	return true
}

const topicsFile = "isrlab-topics.json"

// newClusterMetadata is the cache of a clustered broker: filled by the
// controller's UpdateMetadata and LeaderAndIsr, and topic configs from the
// coordinator.
func newClusterMetadata(b *Broker) *metadata {
	return &metadata{b: b, brokers: map[int32]brokerEndpoint{}, controller: -1, topics: map[string]*topicMeta{}, byID: map[[16]byte]string{}}
}

func openStandaloneMetadata(b *Broker, dir string) (*metadata, error) {
	m := &metadata{b: b, path: filepath.Join(dir, topicsFile), brokers: map[int32]brokerEndpoint{}, controller: b.id, topics: map[string]*topicMeta{}, byID: map[[16]byte]string{}}
	data, err := os.ReadFile(m.path)
	switch {
	case os.IsNotExist(err):
		return m, nil
	case err != nil:
		return nil, fmt.Errorf("read topic metadata: %w", err)
	}
	var topics []*topicMeta
	if err := json.Unmarshal(data, &topics); err != nil {
		return nil, fmt.Errorf("topic metadata %s is corrupt (move it away to start empty): %w", m.path, err)
	}
	for _, t := range topics {
		m.topics[t.Name] = t
		m.setIDLocked(t, t.ID)
	}
	return m, nil
}

func (m *metadata) setSelf(e brokerEndpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.brokers[m.b.id] = e
}

// persistLocked writes the topic list atomically (standalone only).
func (m *metadata) persistLocked() error {
	if m.path == "" {
		return nil
	}
	names := make([]string, 0, len(m.topics))
	for n := range m.topics {
		names = append(names, n)
	}
	sort.Strings(names)
	list := make([]*topicMeta, 0, len(names))
	for _, n := range names {
		list = append(list, m.topics[n])
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	tmp := m.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, m.path)
}

// topic returns a copy of the topic's entry, safe to read while
// UpdateMetadata rewrites the cache.
func (m *metadata) topic(name string) (*topicMeta, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.topics[name]
	if !ok {
		return nil, false
	}
	c := *t
	c.Partitions = slices.Clone(t.Partitions)
	return &c, true
}

// topicByID returns the name of the topic with this ID.
func (m *metadata) topicByID(id [16]byte) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	name, ok := m.byID[id]
	return name, ok
}

// setIDLocked gives t its topic ID; the zero ID is never indexed.
func (m *metadata) setIDLocked(t *topicMeta, id [16]byte) {
	if t.ID != ([16]byte{}) && m.byID[t.ID] == t.Name {
		delete(m.byID, t.ID)
	}
	t.ID = id
	if id != ([16]byte{}) {
		m.byID[id] = t.Name
	}
}

// deleteLocked drops a topic from the cache.
func (m *metadata) deleteLocked(name string) {
	if t, ok := m.topics[name]; ok {
		m.notifyLocked()
		m.setIDLocked(t, [16]byte{})
		delete(m.topics, name)
	}
}

// setTopicID records the ID the controller sent for a topic this broker
// knows.
func (m *metadata) setTopicID(name string, id [16]byte) {
	if id == ([16]byte{}) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.topics[name]; ok && t.ID != id {
		m.setIDLocked(t, id)
	}
}

// brokerLive reports whether the controller's last UpdateMetadata listed id
// among the live brokers (the broker itself counts as live).
func (m *metadata) brokerLive(id int32) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.brokers[id]
	return ok
}

func (m *metadata) topicNames() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	names := make([]string, 0, len(m.topics))
	for n := range m.topics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// brokersOn lists the live brokers as clients of listener reach them.
func (m *metadata) brokersOn(listener string) []brokerEndpoint {
	all := m.brokerList()
	out := all[:0]
	for _, e := range all {
		if e, ok := e.on(listener); ok {
			out = append(out, e)
		}
	}
	return out
}

func (m *metadata) brokerList() []brokerEndpoint {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]brokerEndpoint, 0, len(m.brokers))
	for _, b := range m.brokers {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// createTopicStandalone creates a topic led entirely by this broker and
// returns its ID.
func (b *Broker) createTopicStandalone(name string, partitions int32, configs map[string]string) ([16]byte, error) {
	m := b.meta
	m.mu.Lock()
	if _, ok := m.topics[name]; ok {
		m.mu.Unlock()
		return [16]byte{}, errTopicExists
	}
	t := &topicMeta{Name: name, Configs: configs}
	for i := int32(0); i < partitions; i++ {
		t.Partitions = append(t.Partitions, partitionMeta{Leader: b.id, LeaderEpoch: 0, Replicas: []int32{b.id}, ISR: []int32{b.id}})
	}
	m.topics[name] = t
	m.setIDLocked(t, coord.NewTopicID())
	id := t.ID
	err := m.persistLocked()
	if err != nil {
		m.deleteLocked(name)
	}
	m.mu.Unlock()
	if err != nil {
		return id, fmt.Errorf("persist topic %s: %w", name, err)
	}
	return id, b.openTopicPartitions(t)
}

// deleteTopicStandalone removes a topic and its data.
func (b *Broker) deleteTopicStandalone(name string) error {
	m := b.meta
	m.mu.Lock()
	t, ok := m.topics[name]
	if !ok {
		m.mu.Unlock()
		return errUnknownTopic
	}
	m.deleteLocked(name)
	err := m.persistLocked()
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("persist topic deletion %s: %w", name, err)
	}
	for i := range t.Partitions {
		k := tp{name, int32(i)}
		b.mu.Lock()
		delete(b.partitions, k)
		b.mu.Unlock()
		b.hwCheckpoint.Forget(name, int32(i))
		if err := b.logs.Delete(name, int32(i)); err != nil {
			b.log.Warn("delete partition data", "topic", name, "partition", i, "err", err)
		}
	}
	return nil
}

// loadPartitions opens every partition the metadata says this broker leads.
func (b *Broker) loadPartitions() error {
	for _, n := range b.meta.topicNames() {
		t, _ := b.meta.topic(n)
		if err := b.openTopicPartitions(t); err != nil {
			return err
		}
	}
	return nil
}

func (b *Broker) openTopicPartitions(t *topicMeta) error {
	tc, err := b.cfg.TopicConfig(t.Configs)
	if err != nil {
		return fmt.Errorf("topic %s config: %w", t.Name, err)
	}
	_ = tc
	for i, pm := range t.Partitions {
		idx := int32(i)
		p, err := b.ensurePartition(t.Name, idx, t.Configs)
		if err != nil {
			return fmt.Errorf("open %s-%d: %w", t.Name, idx, err)
		}
		if pm.Leader == b.id {
			st := partition.LeaderAndISR{Leader: pm.Leader, LeaderEpoch: pm.LeaderEpoch, ISR: pm.ISR}
			if err := p.MakeLeader(st, pm.Replicas, 0, b.hwCheckpoint.HW(t.Name, idx)); err != nil {
				return fmt.Errorf("make leader %s-%d: %w", t.Name, idx, err)
			}
			b.groupsOnLeader(t.Name, idx, pm.LeaderEpoch)
		}
	}
	return nil
}

func (m *metadata) setBroker(e brokerEndpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.brokers[e.ID]; ok && e.Endpoints == nil && old.Host == e.Host && old.Port == e.Port {
		// A LeaderAndIsr's live leaders carry only the inter-broker
		// address: keep the listeners UpdateMetadata gave.
		e.Endpoints = old.Endpoints
	}
	m.brokers[e.ID] = e
}

func (m *metadata) brokerAddr(id int32) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.brokers[id]
	if !ok {
		return "", false
	}
	return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))), true
}

func (m *metadata) controllerID() int32 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.controller
}

// topicLocked returns the topic entry, creating it with n partitions slots.
func (m *metadata) topicLocked(name string, n int) *topicMeta {
	t, ok := m.topics[name]
	if !ok {
		t = &topicMeta{Name: name}
		m.topics[name] = t
	}
	for len(t.Partitions) < n {
		t.Partitions = append(t.Partitions, partitionMeta{Leader: -1, LeaderEpoch: -1})
	}
	return t
}

func (m *metadata) setTopicConfigs(topic string, configs map[string]string, partitions int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if configs == nil {
		configs = map[string]string{}
	}
	if t, ok := m.topics[topic]; ok {
		t.Configs = configs
		return
	}
	m.pendingConfigs()[topic] = configs
}

func (m *metadata) pendingConfigs() map[string]map[string]string {
	if m.configs == nil {
		m.configs = map[string]map[string]string{}
	}
	return m.configs
}

func (m *metadata) topicConfigs(topic string) map[string]string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if t, ok := m.topics[topic]; ok && t.Configs != nil {
		return t.Configs
	}
	return m.configs[topic]
}

// leaderDuringDelete in UpdateMetadata marks a partition of a deleted topic.
const leaderDuringDelete = -2

// applyUpdateMetadata merges an UpdateMetadata into the cache: live brokers
// are replaced, partition states updated, deleted topics dropped. It
// returns the number of partition states in the request.
func (m *metadata) applyUpdateMetadata(req *kmsg.UpdateMetadataRequest) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.notifyLocked()
	m.controller = req.ControllerID
	m.brokers = map[int32]brokerEndpoint{}
	for _, lb := range req.LiveBrokers {
		e := brokerEndpoint{ID: lb.ID, Host: lb.Host, Port: lb.Port, Rack: lb.Rack}
		if len(lb.Endpoints) > 0 {
			e.Host, e.Port = lb.Endpoints[0].Host, lb.Endpoints[0].Port
			e.Endpoints = map[string]hostPort{}
			for _, ep := range lb.Endpoints {
				e.Endpoints[strings.ToUpper(ep.ListenerName)] = hostPort{ep.Host, ep.Port}
			}
			if hp, ok := e.Endpoints[m.interBroker()]; ok {
				e.Host, e.Port = hp.Host, hp.Port
			}
		}
		m.brokers[lb.ID] = e
	}
	states := req.PartitionStates
	ids := map[string][16]byte{}
	for _, ts := range req.TopicStates {
		ids[ts.Topic] = ts.TopicID
		for _, ps := range ts.PartitionStates {
			ps.Topic = ts.Topic
			states = append(states, ps)
		}
	}
	for _, ps := range states {
		if ps.Leader == leaderDuringDelete {
			m.deleteLocked(ps.Topic)
			continue
		}
		t := m.topicLocked(ps.Topic, int(ps.Partition)+1)
		if t.Configs == nil {
			t.Configs = m.configs[ps.Topic]
		}
		if id := ids[ps.Topic]; id != ([16]byte{}) && t.ID != id {
			m.setIDLocked(t, id)
		}
		t.Partitions[ps.Partition] = partitionMeta{Leader: ps.Leader, LeaderEpoch: ps.LeaderEpoch, Replicas: ps.Replicas, ISR: ps.ISR, Offline: ps.OfflineReplicas}
	}
	return len(states)
}

// interBroker is the name of the inter-broker listener.
func (m *metadata) interBroker() string {
	if m.b == nil || m.b.ls == nil {
		return ""
	}
	return m.b.ls.interBroker
}

// addrOn maps broker id's inter-broker address to the one clients of
// listener use.
func (m *metadata) addrOn(id int32, listener, host string, port int32) (string, int32) {
	m.mu.RLock()
	e, ok := m.brokers[id]
	m.mu.RUnlock()
	if !ok || port < 0 {
		return host, port
	}
	if e, ok := e.on(listener); ok {
		return e.Host, e.Port
	}
	return host, port
}
