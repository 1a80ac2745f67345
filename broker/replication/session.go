package replication

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Incremental fetch sessions (KIP-227, Fetch v7+), after Kafka's
// FetchSession.scala. A fetch with session epoch 0 is a full fetch that
// asks for a session: the response carries a new session id and the broker
// caches the fetched partitions with their fetch parameters and the high
// watermark and log start offset last sent. The client then sends epoch 1,
// 2, ... with only the partitions whose parameters changed (and the ones to
// forget); the broker reads every cached partition and answers only those
// with records, an error, or a changed high watermark or log start offset.
// Epoch -1 is a sessionless full fetch (followers here, old clients); a
// full fetch naming a session closes it. An unknown session id gets
// FETCH_SESSION_ID_NOT_FOUND, an unexpected epoch INVALID_FETCH_SESSION_EPOCH
// (also when two requests race with one epoch), and the client falls back
// to a full fetch.
//
// The cache holds max.incremental.fetch.session.cache.slots sessions. A
// new session takes a free slot, else evicts a session unused for two
// minutes, else the least valuable evictable one: a follower's (privileged)
// session may evict any consumer's, and a bigger session may evict a
// smaller one older than two minutes (Kafka's tryEvict). Without a slot
// the full fetch is answered with session id 0.

const (
	initialSessionEpoch = 0
	finalSessionEpoch   = -1
	// sessionEvictionMs is Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS.
	sessionEvictionMs = 120000
)

func nextSessionEpoch(e int32) int32 {
	if e < 0 {
		return finalSessionEpoch
	}
	if e == 1<<31-1 {
		return 1
	}
	return e + 1
}

// sessionKey names a partition in a session: by topic name, or by topic
// ID from Fetch v13.
type sessionKey struct {
	topic     string
	id        [16]byte
	partition int32
}

// cachedPartition is one partition of a session.
type cachedPartition struct {
	key      sessionKey
	req      kmsg.FetchRequestTopicPartition // the fetch parameters last sent
	hw       int64                           // last high watermark answered; -1 after an error
	logStart int64                           // last log start offset answered
}

// fetchSession is one client's session.
type fetchSession struct {
	id         int32
	privileged bool // a follower's
	topicIDs   bool // Fetch v13+
	createdMs  int64

	mu       sync.Mutex
	lastUsed int64
	epoch    int32
	parts    []*cachedPartition // in fetch order: partitions that returned data go last
}

func (s *fetchSession) find(k sessionKey) int {
	return slices.IndexFunc(s.parts, func(c *cachedPartition) bool { return c.key == k })
}

// SessionCache is the broker's FetchSessionCache.
type SessionCache struct {
	mu       sync.Mutex
	slots    int
	now      func() time.Time
	rng      *rand.Rand
	sessions map[int32]*fetchSession

	evictions prometheus.Counter
}

// NewSessionCache returns a cache of at most slots sessions, reading
// time from now, with its metrics registered on reg (if not nil).
func NewSessionCache(slots int, now func() time.Time, reg prometheus.Registerer) *SessionCache {
	c := &SessionCache{slots: slots, now: now, sessions: map[int32]*fetchSession{},
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6973726c6162))}
	c.evictions = prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_server_FetchSessionCache_IncrementalFetchSessionEvictionsPerSec", Help: "Fetch sessions evicted from the cache (FetchSessionCache)."})
	sessions := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kafka_server_FetchSessionCache_NumIncrementalFetchSessions", Help: "Incremental fetch sessions in the cache."},
		func() float64 { n, _ := c.Size(); return float64(n) })
	parts := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kafka_server_FetchSessionCache_NumIncrementalFetchPartitionsCached", Help: "Partitions held by the cached fetch sessions."},
		func() float64 { _, n := c.Size(); return float64(n) })
	if reg != nil {
		reg.MustRegister(c.evictions, sessions, parts)
	}
	return c
}

// Size returns the number of sessions and of cached partitions.
func (c *SessionCache) Size() (sessions, partitions int) {
	c.mu.Lock()
	list := make([]*fetchSession, 0, len(c.sessions))
	for _, s := range c.sessions {
		list = append(list, s)
	}
	c.mu.Unlock()
	for _, s := range list {
		s.mu.Lock()
		partitions += len(s.parts)
		s.mu.Unlock()
	}
	return len(list), partitions
}

// Session is a snapshot of one cached session.
type Session struct {
	ID, Epoch  int32
	Partitions int
}

// Sessions returns a snapshot of the cached sessions.
func (c *SessionCache) Sessions() []Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Session, 0, len(c.sessions))
	for _, s := range c.sessions {
		s.mu.Lock()
		out = append(out, Session{ID: s.id, Epoch: s.epoch, Partitions: len(s.parts)})
		s.mu.Unlock()
	}
	return out
}

func (c *SessionCache) nowMs() int64 { return c.now().UnixMilli() }

// FetchContext is how one Fetch is answered: sessionless, full (perhaps
// creating a session), incremental, or a session error.
type FetchContext struct {
	c       *SessionCache
	kind    int
	err     *kerr.Error
	session *fetchSession
	// full fetch: the request's partitions, to cache in a new session
	req        *kmsg.FetchRequest
	privileged bool
}

const (
	ctxSessionless = iota
	ctxFull
	ctxIncremental
	ctxError
)

func keyOf(t kmsg.FetchRequestTopic, p int32, topicIDs bool) sessionKey {
	if topicIDs {
		return sessionKey{id: t.TopicID, partition: p}
	}
	return sessionKey{topic: t.Topic, partition: p}
}

// Open decides how req is answered (Kafka's FetchManager.newContext) and
// returns the request to read: for an incremental fetch, every partition
// of the session with its cached parameters.
func (c *SessionCache) Open(req *kmsg.FetchRequest) (*FetchContext, *kmsg.FetchRequest) {
	if req.Version < 7 || c == nil {
		return &FetchContext{kind: ctxSessionless}, req
	}
	topicIDs := req.Version >= 13
	privileged := req.ReplicaID >= 0
	if req.Version >= 15 {
		privileged = req.ReplicaState.ID >= 0
	}
	if req.SessionEpoch == initialSessionEpoch || req.SessionEpoch == finalSessionEpoch {
		if req.SessionID != 0 {
			c.remove(req.SessionID)
		}
		if req.SessionEpoch == finalSessionEpoch {
			return &FetchContext{kind: ctxSessionless}, req
		}
		return &FetchContext{c: c, kind: ctxFull, req: req, privileged: privileged}, req
	}
	c.mu.Lock()
	s, ok := c.sessions[req.SessionID]
	c.mu.Unlock()
	if !ok {
		return &FetchContext{kind: ctxError, err: kerr.FetchSessionIDNotFound}, req
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.epoch != req.SessionEpoch:
		return &FetchContext{kind: ctxError, err: kerr.InvalidFetchSessionEpoch}, req
	case s.topicIDs != topicIDs:
		return &FetchContext{kind: ctxError, err: kerr.FetchSessionTopicIDError}, req
	}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			k := keyOf(rt, rp.Partition, topicIDs)
			if i := s.find(k); i >= 0 {
				s.parts[i].req = rp
				if s.parts[i].key.topic == "" {
					s.parts[i].key.topic = rt.Topic
				}
				continue
			}
			k.topic = rt.Topic
			s.parts = append(s.parts, &cachedPartition{key: k, req: rp, hw: -1, logStart: -1})
		}
	}
	for _, ft := range req.ForgottenTopics {
		for _, p := range ft.Partitions {
			k := sessionKey{topic: ft.Topic, partition: p}
			if topicIDs {
				k = sessionKey{id: ft.TopicID, partition: p}
			}
			if i := slices.IndexFunc(s.parts, func(c *cachedPartition) bool {
				return c.key.partition == k.partition && (topicIDs && c.key.id == k.id || !topicIDs && c.key.topic == k.topic)
			}); i >= 0 {
				s.parts = slices.Delete(s.parts, i, i+1)
			}
		}
	}
	if len(s.parts) == 0 {
		// Nothing left: the session closes and this fetch is sessionless.
		c.mu.Lock()
		delete(c.sessions, s.id)
		c.mu.Unlock()
		return &FetchContext{kind: ctxSessionless}, req
	}
	s.lastUsed = c.nowMs()
	s.epoch = nextSessionEpoch(s.epoch)
	// Read every partition of the session, in the session's order.
	eff := *req
	eff.Topics = nil
	for _, cp := range s.parts {
		if n := len(eff.Topics); n == 0 || eff.Topics[n-1].Topic != cp.key.topic || eff.Topics[n-1].TopicID != cp.key.id {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = cp.key.topic, cp.key.id
			eff.Topics = append(eff.Topics, rt)
		}
		last := &eff.Topics[len(eff.Topics)-1]
		last.Partitions = append(last.Partitions, cp.req)
	}
	return &FetchContext{c: c, kind: ctxIncremental, session: s, req: req}, &eff
}

// ErrorResponse is the answer to a session error: the error, no partitions.
func (fc *FetchContext) ErrorResponse(req *kmsg.FetchRequest) (*kmsg.FetchResponse, bool) {
	if fc.kind != ctxError {
		return nil, false
	}
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	resp.ErrorCode = fc.err.Code
	return resp, true
}

// Finish turns the response read for the effective request into the
// answer: a full fetch creates a session; an incremental one keeps only
// the partitions that must be sent and updates the cache.
func (fc *FetchContext) Finish(resp *kmsg.FetchResponse) *kmsg.FetchResponse {
	switch fc.kind {
	case ctxFull:
		resp.SessionID = fc.c.create(fc.req, resp, fc.privileged)
	case ctxIncremental:
		s := fc.session
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.epoch != nextSessionEpoch(fc.req.SessionEpoch) {
			// Another request with the same epoch went through meanwhile.
			out := fc.req.ResponseKind().(*kmsg.FetchResponse)
			out.ErrorCode, out.SessionID = kerr.InvalidFetchSessionEpoch.Code, s.id
			return out
		}
		resp.SessionID = s.id
		var moved []*cachedPartition
		kept := resp.Topics[:0]
		for _, rt := range resp.Topics {
			ps := rt.Partitions[:0]
			for _, rp := range rt.Partitions {
				k := sessionKey{topic: rt.Topic, partition: rp.Partition}
				if s.topicIDs {
					k = sessionKey{id: rt.TopicID, partition: rp.Partition}
				}
				i := slices.IndexFunc(s.parts, func(c *cachedPartition) bool {
					return c.key.partition == k.partition && (s.topicIDs && c.key.id == k.id || !s.topicIDs && c.key.topic == k.topic)
				})
				if i < 0 {
					continue
				}
				cp := s.parts[i]
				must := len(rp.RecordBatches) > 0 || rp.ErrorCode != 0 || rp.DivergingEpoch.Epoch >= 0 || rp.PreferredReadReplica >= 0 ||
					cp.hw != rp.HighWatermark || cp.logStart != rp.LogStartOffset
				cp.hw, cp.logStart = rp.HighWatermark, rp.LogStartOffset
				if rp.ErrorCode != 0 {
					cp.hw = -1 // so the partition is sent again once the error clears
				}
				if len(rp.RecordBatches) > 0 {
					moved = append(moved, cp)
				}
				if must {
					ps = append(ps, rp)
				}
			}
			if len(ps) > 0 {
				rt.Partitions = ps
				kept = append(kept, rt)
			}
		}
		resp.Topics = kept
		// Partitions that returned data go to the back of the order, so
		// the next fetch's byte budget reaches the others first.
		for _, cp := range moved {
			if i := slices.Index(s.parts, cp); i >= 0 {
				s.parts = append(slices.Delete(s.parts, i, i+1), cp)
			}
		}
	}
	return resp
}

// create caches a full fetch's partitions in a new session if a slot is
// free or can be freed; it returns the session id, 0 for none.
func (c *SessionCache) create(req *kmsg.FetchRequest, resp *kmsg.FetchResponse, privileged bool) int32 {
	topicIDs := req.Version >= 13
	var parts []*cachedPartition
	answered := map[sessionKey]kmsg.FetchResponseTopicPartition{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			answered[sessionKey{topic: rt.Topic, id: rt.TopicID, partition: rp.Partition}] = rp
		}
	}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			k := keyOf(rt, rp.Partition, topicIDs)
			k.topic = rt.Topic
			cp := &cachedPartition{key: k, req: rp, hw: -1, logStart: -1}
			if a, ok := answered[sessionKey{topic: rt.Topic, id: rt.TopicID, partition: rp.Partition}]; ok && a.ErrorCode == 0 {
				cp.hw, cp.logStart = a.HighWatermark, a.LogStartOffset
			}
			parts = append(parts, cp)
		}
	}
	now := c.nowMs()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sessions) >= c.slots && !c.tryEvictLocked(privileged, len(parts), now) {
		return 0
	}
	s := &fetchSession{privileged: privileged, topicIDs: topicIDs, createdMs: now, lastUsed: now, epoch: nextSessionEpoch(initialSessionEpoch), parts: parts}
	for {
		s.id = c.rng.Int32N(1<<31-1) + 1
		if _, taken := c.sessions[s.id]; !taken {
			break
		}
	}
	c.sessions[s.id] = s
	return s.id
}

// tryEvictLocked frees a slot as Kafka's tryEvict does: the least recently
// used session if it is stale, else the least valuable evictable session
// (ordered by privileged, size, id) if the new one is worth more.
func (c *SessionCache) tryEvictLocked(privileged bool, size int, now int64) bool {
	var lru *fetchSession
	var lruUsed int64
	type key struct {
		privileged bool
		size       int
		id         int32
	}
	less := func(a, b key) bool {
		if a.privileged != b.privileged {
			return !a.privileged
		}
		if a.size != b.size {
			return a.size < b.size
		}
		return a.id < b.id
	}
	var victim *fetchSession
	var vk key
	for _, s := range c.sessions {
		s.mu.Lock()
		used, n := s.lastUsed, len(s.parts)
		s.mu.Unlock()
		if lru == nil || used < lruUsed || used == lruUsed && s.id < lru.id {
			lru, lruUsed = s, used
		}
		// Kafka's evictableByPrivileged holds consumers' sessions and old
		// followers' ones; evictableByAll only sessions older than the
		// eviction time.
		old := now-s.createdMs > sessionEvictionMs
		if privileged && !(!s.privileged || old) || !privileged && !old {
			continue
		}
		k := key{s.privileged, n, s.id}
		if victim == nil || less(k, vk) {
			victim, vk = s, k
		}
	}
	if lru == nil {
		return false
	}
	if now-lruUsed > sessionEvictionMs {
		delete(c.sessions, lru.id)
		c.evictions.Inc()
		return true
	}
	if victim == nil || less(key{privileged, size, 0}, vk) {
		return false
	}
	delete(c.sessions, victim.id)
	c.evictions.Inc()
	return true
}

func (c *SessionCache) remove(id int32) {
	c.mu.Lock()
	delete(c.sessions, id)
	c.mu.Unlock()
}
