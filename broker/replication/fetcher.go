package replication

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/broker/wire"
)

// Dialer dials another broker.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// fetcherKey names one replica fetcher: num.replica.fetchers of them per
// source broker, partitions spread over them by hash.
type fetcherKey struct {
	leader int32
	index  int
}

// Fetchers owns the broker's replica fetchers (Kafka's
// ReplicaFetcherManager).
type Fetchers struct {
	cfg    Config
	broker Broker
	dial   Dialer
	log    *slog.Logger
	ctx    context.Context

	mu  sync.Mutex
	all map[fetcherKey]*fetcher
	wg  sync.WaitGroup
	// missing counts the consecutive checks that found a follower
	// partition in no fetcher (see reconcile).
	missing map[tp]int
}

// fetchPart is one partition a fetcher replicates.
type fetchPart struct {
	p           *partition.Partition
	leaderEpoch int32
	truncating  bool      // truncate before fetching again
	probeEpoch  int32     // epoch to ask about while truncating (KIP-279 iteration)
	delayUntil  time.Time // a failed attempt's backoff
	heldUntil   time.Time // Hold's delay, which no failure shortens
	lag         int64     // leader HW minus our LEO at the last fetch (FetcherLagMetrics)

	// Why the partition is not fetching, for the WARN the fetcher logs
	// rather than leave it idle in silence.
	lastOK  time.Time // the last fetch applied without error (or when fetching began)
	lastErr error     // the last error, nil after a good fetch
	waitFor string    // what a retry waits for
	warned  time.Time // the last WARN about this partition
}

// fetcher replicates a set of partitions from one leader.
type fetcher struct {
	f      *Fetchers
	key    fetcherKey
	client *wire.Client
	cancel context.CancelFunc

	mu    sync.Mutex
	parts map[tp]*fetchPart
	wake  chan struct{}

	// The last fetcher-wide error and its WARN: one line for every
	// partition of the fetcher, not one each.
	lastErr string
	warned  time.Time
}

// NewFetchers returns the broker's replica fetchers; they run until ctx
// ends or Close. dial may be nil (net.Dialer).
func NewFetchers(ctx context.Context, cfg Config, b Broker, dial Dialer, log *slog.Logger) *Fetchers {
	return &Fetchers{cfg: cfg, broker: b, dial: dial, log: log, ctx: ctx, all: map[fetcherKey]*fetcher{}, missing: map[tp]int{}}
}

// MaxLag is ReplicaFetcherManager's MaxLag: the largest lag of any
// partition being fetched.
func (fs *Fetchers) MaxLag() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var m int64
	for _, f := range fs.all {
		f.mu.Lock()
		for _, fp := range f.parts {
			m = max(m, fp.lag)
		}
		f.mu.Unlock()
	}
	return m
}

func (fs *Fetchers) keyFor(leader int32, t tp) fetcherKey {
	h := fnv.New32a()
	h.Write([]byte(t.topic))
	h.Write([]byte(strconv.Itoa(int(t.partition))))
	return fetcherKey{leader: leader, index: int(h.Sum32() % uint32(fs.cfg.NumFetchers))}
}

// Add makes p fetch from leader at leaderEpoch, truncating first.
func (fs *Fetchers) Add(p *partition.Partition, leader, leaderEpoch int32) {
	t := tp{p.Topic, p.Index}
	fs.remove(t)
	addr, ok := fs.broker.BrokerAddr(leader)
	if !ok {
		fs.log.Warn("no address for leader; fetch waits for metadata", "topic", p.Topic, "partition", p.Index, "leader", leader)
	}
	key := fs.keyFor(leader, t)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.all[key]
	switch {
	case f == nil:
		f = fs.start(key, addr)
	case ok && f.client.Addr() != addr:
		f = fs.restartLocked(f, addr)
	}
	f.mu.Lock()
	f.parts[t] = &fetchPart{p: p, leaderEpoch: leaderEpoch, truncating: true, probeEpoch: -1, lastOK: time.Now()}
	f.mu.Unlock()
	f.poke()
}

// restartLocked replaces fetcher old with one connecting to addr (the
// leader's address changed, or was unknown when old started) and hands it
// every partition old was fetching: dropping them would leave them idle
// until the next LeaderAndIsr, which for an unchanged leader never comes.
func (fs *Fetchers) restartLocked(old *fetcher, addr string) *fetcher {
	nf := fs.start(old.key, addr)
	old.mu.Lock()
	for t, fp := range old.parts {
		nf.parts[t] = fp
	}
	old.parts = map[tp]*fetchPart{}
	old.mu.Unlock()
	old.stop()
	nf.poke()
	return nf
}

// rebind restarts f on the leader's address from metadata when it differs
// from the one f dials, and reports whether it did (f then stops).
func (fs *Fetchers) rebind(f *fetcher) bool {
	addr, ok := fs.broker.BrokerAddr(f.key.leader)
	if !ok || addr == f.client.Addr() {
		return false
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.all[f.key] != f {
		return true
	}
	fs.log.Warn("replica fetcher moves to the leader's new address", "leader", f.key.leader, "from", f.client.Addr(), "to", addr)
	fs.restartLocked(f, addr)
	return true
}

// fetching reports whether t is fetched from leader at leaderEpoch.
func (fs *Fetchers) fetching(t tp, leader, leaderEpoch int32) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for k, f := range fs.all {
		if k.leader != leader {
			continue
		}
		f.mu.Lock()
		fp := f.parts[t]
		f.mu.Unlock()
		if fp != nil && fp.leaderEpoch == leaderEpoch {
			return true
		}
	}
	return false
}

// Reconcile is the invariant check run with the ISR-expiration task: every
// replica that follows is in a fetcher for its leader and epoch. One found
// missing at two checks in a row (a LeaderAndIsr being applied is missing
// for an instant) is logged at WARN and fetched again.
func (fs *Fetchers) Reconcile(ps []*partition.Partition) {
	seen := map[tp]bool{}
	for _, p := range ps {
		if p.Role() != partition.Follower {
			continue
		}
		t := tp{p.Topic, p.Index}
		leader, epoch := p.Leader()
		if leader < 0 || leader == fs.cfg.BrokerID || fs.fetching(t, leader, epoch) {
			continue
		}
		seen[t] = true
		fs.mu.Lock()
		fs.missing[t]++
		n := fs.missing[t]
		fs.mu.Unlock()
		if n >= 2 {
			fs.log.Warn("follower partition was in no replica fetcher; fetching it again", "topic", t.topic, "partition", t.partition, "leader", leader, "leader_epoch", epoch)
			fs.Add(p, leader, epoch)
		}
	}
	fs.mu.Lock()
	for t := range fs.missing {
		if !seen[t] {
			delete(fs.missing, t)
		}
	}
	fs.mu.Unlock()
}

func (fs *Fetchers) start(key fetcherKey, addr string) *fetcher {
	ctx, cancel := context.WithCancel(fs.ctx)
	f := &fetcher{f: fs, key: key, cancel: cancel, parts: map[tp]*fetchPart{}, wake: make(chan struct{}, 1),
		client: wire.NewClient(addr, "replica-fetcher-"+strconv.Itoa(int(fs.cfg.BrokerID)), fs.dial)}
	f.client.ReuseResponseFrames()
	fs.all[key] = f
	fs.wg.Add(1)
	go func() {
		defer fs.wg.Done()
		f.run(ctx)
	}()
	return f
}

// Remove stops fetching topic/idx wherever it was fetched.
func (fs *Fetchers) Remove(topic string, idx int32) { fs.remove(tp{topic, idx}) }

func (fs *Fetchers) remove(t tp) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.all {
		f.mu.Lock()
		delete(f.parts, t)
		f.mu.Unlock()
	}
}

// Has reports whether a fetcher has topic/idx.
func (fs *Fetchers) Has(topic string, idx int32) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, _ := fs.findLocked(tp{topic, idx})
	return f != nil
}

// Hold delays the next fetch of topic/idx until until (the zero time: now)
// and reports whether a fetcher has the partition: how a test stops one
// partition's fetching without a fault. A failed fetch's backoff does not
// end the hold; a new Add (a new leader or epoch) does.
func (fs *Fetchers) Hold(topic string, idx int32, until time.Time) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, fp := fs.findLocked(tp{topic, idx})
	if f == nil {
		return false
	}
	f.mu.Lock()
	fp.heldUntil = until
	f.mu.Unlock()
	f.poke()
	return true
}

// waiting reports whether fp is backing off or held at now.
func (fp *fetchPart) waiting(now time.Time) bool {
	return now.Before(fp.delayUntil) || now.Before(fp.heldUntil)
}

// findLocked returns the fetcher that has t and t's fetch state (nil, nil
// when none has it); fs.mu is held.
func (fs *Fetchers) findLocked(t tp) (*fetcher, *fetchPart) {
	for _, f := range fs.all {
		f.mu.Lock()
		fp := f.parts[t]
		f.mu.Unlock()
		if fp != nil {
			return f, fp
		}
	}
	return nil, nil
}

// Close stops every fetcher and waits for them.
func (fs *Fetchers) Close() {
	fs.mu.Lock()
	for _, f := range fs.all {
		f.stop()
	}
	fs.mu.Unlock()
	fs.wg.Wait()
}

func (f *fetcher) stop() {
	f.cancel()
	f.client.Close()
}

func (f *fetcher) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *fetcher) snapshot() map[tp]*fetchPart {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[tp]*fetchPart, len(f.parts))
	for k, v := range f.parts {
		out[k] = v
	}
	return out
}

// current reports whether fp is still the fetch state of t (a LeaderAndIsr
// may have replaced or removed it while a request was out).
func (f *fetcher) current(t tp, fp *fetchPart) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parts[t] == fp
}

func (f *fetcher) backoff(ctx context.Context) {
	t := time.NewTimer(f.f.cfg.FetchBackoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// run is the fetcher's loop: truncate what needs it, then fetch.
func (f *fetcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		parts := f.snapshot()
		if len(parts) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-f.wake:
			}
			continue
		}
		if f.client.Addr() == "" {
			if f.f.rebind(f) {
				return
			}
			f.failAll(parts, errNoLeaderAddress, "the leader's address in an UpdateMetadata")
			f.warnIdle(parts)
			f.backoff(ctx)
			continue
		}
		for t, fp := range parts {
			if fp.truncating && !fp.waiting(time.Now()) {
				if err := f.truncate(ctx, t, fp); err != nil && ctx.Err() == nil {
					f.fail(t, fp, fmt.Errorf("truncation: %w", err), "an OffsetForLeaderEpoch answer from the leader")
				}
			}
		}
		if err := f.fetchOnce(ctx); err != nil && ctx.Err() == nil {
			f.f.log.Debug("replica fetch", "leader", f.key.leader, "err", err)
			if f.f.rebind(f) {
				return
			}
			f.failAll(f.snapshot(), err, "a Fetch answer from leader "+strconv.Itoa(int(f.key.leader))+" at "+f.client.Addr())
			f.backoff(ctx)
		}
		f.warnIdle(f.snapshot())
	}
}

var errNoLeaderAddress = errors.New("no address for the leader")

// fail records why t is not fetching, delays its next attempt by
// replica.fetch.backoff.ms (then it is retried, as Kafka's fetcher retries
// a delayed partition) and logs a WARN when the reason is new or the last
// WARN is older than replica.lag.time.max.ms.
func (f *fetcher) fail(t tp, fp *fetchPart, err error, waitFor string) {
	now := time.Now()
	f.mu.Lock()
	same := fp.lastErr != nil && fp.lastErr.Error() == err.Error() && fp.waitFor == waitFor
	fp.lastErr, fp.waitFor = err, waitFor
	fp.delayUntil = now.Add(f.f.cfg.FetchBackoff)
	warn := !same || now.Sub(fp.warned) > f.lagMax()
	if warn {
		fp.warned = now
	}
	leaderEpoch := fp.leaderEpoch
	f.mu.Unlock()
	if warn {
		f.f.log.Warn("follower partition not fetching; retrying", "topic", t.topic, "partition", t.partition,
			"leader", f.key.leader, "leader_epoch", leaderEpoch, "err", err, "waiting_for", waitFor)
	}
}

// failAll is fail for an error of the whole fetcher (no connection, no
// address): every partition records it and backs off, and one WARN names
// the leader and how many partitions wait, when the error is new or the
// last WARN is older than replica.lag.time.max.ms.
func (f *fetcher) failAll(parts map[tp]*fetchPart, err error, waitFor string) {
	now := time.Now()
	until := now.Add(f.f.cfg.FetchBackoff)
	f.mu.Lock()
	for _, fp := range parts {
		fp.lastErr, fp.waitFor, fp.delayUntil = err, waitFor, until
	}
	warn := f.lastErr != err.Error() || now.Sub(f.warned) > f.lagMax()
	if warn {
		f.lastErr, f.warned = err.Error(), now
	}
	f.mu.Unlock()
	if warn {
		f.f.log.Warn("replica fetcher not fetching; retrying", "leader", f.key.leader, "partitions", len(parts),
			"err", err, "waiting_for", waitFor)
	}
}

// ok records a fetch applied without error.
func (f *fetcher) ok(fp *fetchPart) {
	f.mu.Lock()
	fp.lastOK, fp.lastErr, fp.waitFor = time.Now(), nil, ""
	f.lastErr = ""
	f.mu.Unlock()
}

func (f *fetcher) lagMax() time.Duration { return f.f.cfg.LagTimeMax }

// warnIdle logs, once per replica.lag.time.max.ms, every partition that has
// not had a good fetch for that long, with the last error and what its
// retry waits for.
func (f *fetcher) warnIdle(parts map[tp]*fetchPart) {
	now := time.Now()
	lag := f.lagMax()
	for t, fp := range parts {
		f.mu.Lock()
		idle := now.Sub(fp.lastOK)
		due := idle > lag && now.Sub(fp.warned) > lag
		if due {
			fp.warned = now
		}
		err, waitFor, truncating, epoch, until := fp.lastErr, fp.waitFor, fp.truncating, fp.leaderEpoch, fp.delayUntil
		f.mu.Unlock()
		if !due {
			continue
		}
		switch {
		case waitFor != "":
		case now.Before(until):
			waitFor = "its fetch backoff to end at " + until.Format(time.RFC3339Nano)
		case truncating:
			waitFor = "truncation to the leader's log"
		default:
			waitFor = "a Fetch answer from the leader"
		}
		errText := "none"
		if err != nil {
			errText = err.Error()
		}
		f.f.log.Warn("follower partition idle longer than replica.lag.time.max.ms", "topic", t.topic, "partition", t.partition,
			"leader", f.key.leader, "leader_epoch", epoch, "idle", idle.Round(time.Millisecond), "err", errText, "waiting_for", waitFor)
	}
}

// truncate brings a follower's log to a prefix of the leader's (§5).
func (f *fetcher) truncate(ctx context.Context, t tp, fp *fetchPart) error {
	p := fp.p
	sw := p.Switches()
	switch {
	case sw.Truncation == partition.TruncateHW:
		// Before KIP-101: truncate to the local HW and fetch from there.
		if err := p.TruncateTo(p.HighWatermark()); err != nil {
			return err
		}
	case sw.Truncation == partition.TruncateDiverging && fp.probeEpoch < 0:
		// From 2.8 the fetch itself carries the last fetched epoch; the
		// leader answers with a diverging epoch when the logs differ.
	default:
		for i := 0; ; i++ {
			epoch := fp.probeEpoch
			if epoch < 0 {
				epoch = p.LatestEpoch()
			}
			if epoch < 0 {
				if err := p.TruncateTo(p.HighWatermark()); err != nil {
					return err
				}
				break
			}
			le, end, err := f.offsetForLeaderEpoch(ctx, t, fp.leaderEpoch, epoch)
			if err != nil {
				return err
			}
			off, done, next := p.TruncationPoint(epoch, le, end)
			if done {
				if err := p.TruncateTo(off); err != nil {
					return err
				}
				break
			}
			fp.probeEpoch = next
			if i > 1000 {
				return errors.New("truncation did not converge")
			}
		}
	}
	if f.current(t, fp) {
		f.mu.Lock()
		fp.truncating, fp.probeEpoch = false, -1
		f.mu.Unlock()
	}
	return nil
}

func (f *fetcher) offsetForLeaderEpoch(ctx context.Context, t tp, current, epoch int32) (int32, int64, error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.SetVersion(4)
	req.ReplicaID = f.f.cfg.BrokerID
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = t.topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = t.partition, f.f.cfg.fencingEpoch(current), epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := f.client.Request(cctx, req)
	if err != nil {
		return 0, 0, err
	}
	resp := raw.(*kmsg.OffsetForLeaderEpochResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, 0, errors.New("malformed OffsetForLeaderEpoch response")
	}
	sp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(sp.ErrorCode); err != nil {
		return 0, 0, err
	}
	return sp.LeaderEpoch, sp.EndOffset, nil
}

// fetchOnce sends one Fetch for every partition that is ready and applies
// the response.
func (f *fetcher) fetchOnce(ctx context.Context) error {
	cfg := &f.f.cfg
	parts := f.snapshot()
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.ReplicaID = cfg.BrokerID
	req.MaxWaitMillis = cfg.FetchWaitMaxMs
	req.MinBytes = cfg.FetchMinBytes
	req.MaxBytes = cfg.FetchResponseMaxBytes
	req.SessionEpoch = -1
	byTopic := map[string]int{}
	sent := map[tp]*fetchPart{}
	now := time.Now()
	for t, fp := range parts {
		if fp.truncating || fp.waiting(now) {
			continue
		}
		i, ok := byTopic[t.topic]
		if !ok {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = t.topic
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
			byTopic[t.topic] = i
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = t.partition
		rp.FetchOffset = fp.p.Log().LogEndOffset()
		rp.LogStartOffset = fp.p.Log().LogStartOffset()
		rp.CurrentLeaderEpoch = cfg.fencingEpoch(fp.leaderEpoch)
		rp.PartitionMaxBytes = cfg.FetchMaxBytes
		rp.LastFetchedEpoch = -1
		if fp.p.Switches().Truncation == partition.TruncateDiverging {
			rp.LastFetchedEpoch = fp.p.LatestEpoch()
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		sent[t] = fp
	}
	if len(sent) == 0 {
		// Everything is truncating or backing off.
		select {
		case <-ctx.Done():
		case <-f.wake:
		case <-time.After(cfg.FetchBackoff):
		}
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(req.MaxWaitMillis)*time.Millisecond+30*time.Second)
	defer cancel()
	raw, err := f.client.Request(cctx, req)
	if err != nil {
		return err
	}
	resp := raw.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return err
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			t := tp{rt.Topic, rp.Partition}
			fp := sent[t]
			if fp == nil || !f.current(t, fp) {
				continue
			}
			f.apply(ctx, t, fp, &rp)
		}
	}
	return nil
}

// apply handles one partition of a follower fetch response.
func (f *fetcher) apply(ctx context.Context, t tp, fp *fetchPart, rp *kmsg.FetchResponseTopicPartition) {
	p := fp.p
	switch err := kerr.ErrorForCode(rp.ErrorCode); {
	case err == nil && rp.DivergingEpoch.Epoch >= 0:
		last, leo := p.LatestEpoch(), p.Log().LogEndOffset()
		off, done, next := p.TruncationPoint(last, rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset)
		if done {
			if err := p.TruncateTo(off); err != nil {
				f.fail(t, fp, fmt.Errorf("truncate to %d on diverging epoch %d: %w", off, rp.DivergingEpoch.Epoch, err), "the log to truncate")
				return
			}
			if p.LatestEpoch() == last && p.Log().LogEndOffset() == leo {
				// The next fetch would get the same answer: say so
				// rather than loop in silence.
				f.fail(t, fp, fmt.Errorf("diverging epoch (%d, %d) for last fetched epoch %d at LEO %d: truncation changed nothing",
					rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset, last, leo), "a different answer from the leader")
			}
			return
		}
		f.mu.Lock()
		fp.truncating, fp.probeEpoch = true, next
		f.mu.Unlock()
	case err == nil:
		if err := p.AppendAsFollower(rp.RecordBatches, rp.HighWatermark, rp.LogStartOffset, fp.leaderEpoch); err != nil {
			f.fail(t, fp, fmt.Errorf("follower append: %w", err), "a fetch that appends")
		} else {
			f.ok(fp)
		}
		f.mu.Lock()
		fp.lag = max(0, rp.HighWatermark-p.Log().LogEndOffset())
		f.mu.Unlock()
	case errors.Is(err, kerr.OffsetOutOfRange):
		f.outOfRange(ctx, t, fp)
	case errors.Is(err, kerr.FencedLeaderEpoch), errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.UnknownTopicOrPartition):
		// A newer leader exists: retried after the backoff until the
		// controller's LeaderAndIsr moves the partition.
		f.fail(t, fp, err, "a LeaderAndIsr with the new leader or epoch")
	case errors.Is(err, kerr.UnknownLeaderEpoch):
		// The leader has not applied our epoch's LeaderAndIsr yet.
		f.fail(t, fp, err, "the leader to apply leader epoch "+strconv.Itoa(int(fp.leaderEpoch)))
	default:
		f.fail(t, fp, err, "a retry")
	}
}

// outOfRange: the fetch offset is outside the leader's log (§5.4). Behind
// the leader's LEO means we are below its log start: restart at it. Ahead
// of it means the leader has less: truncate to its LEO (pre-KIP-101 data
// loss lives here).
func (f *fetcher) outOfRange(ctx context.Context, t tp, fp *fetchPart) {
	p := fp.p
	leaderLEO, leaderStart, err := f.leaderOffsets(ctx, t, fp.leaderEpoch)
	if err != nil {
		f.fail(t, fp, fmt.Errorf("out of range, leader offsets: %w", err), "a ListOffsets answer from the leader")
		return
	}
	if leaderLEO < p.Log().LogEndOffset() {
		err = p.TruncateTo(leaderLEO)
	} else {
		err = p.TruncateFullyAndStartAt(leaderStart)
	}
	if err != nil {
		f.fail(t, fp, fmt.Errorf("out-of-range truncation: %w", err), "the log to truncate")
	}
}

// The ListOffsets timestamps that ask for the log end and the log start.
const (
	latestTimestamp   = -1
	earliestTimestamp = -2
)

func (f *fetcher) leaderOffsets(ctx context.Context, t tp, epoch int32) (int64, int64, error) {
	ask := func(ts int64) (int64, error) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.SetVersion(4)
		req.ReplicaID = f.f.cfg.BrokerID
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = t.topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = t.partition, ts, f.f.cfg.fencingEpoch(epoch)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		raw, err := f.client.Request(cctx, req)
		if err != nil {
			return 0, err
		}
		resp := raw.(*kmsg.ListOffsetsResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return 0, errors.New("malformed ListOffsets response")
		}
		sp := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(sp.ErrorCode); err != nil {
			return 0, err
		}
		return sp.Offset, nil
	}
	leo, err := ask(latestTimestamp)
	if err != nil {
		return 0, 0, err
	}
	start, err := ask(earliestTimestamp)
	return leo, start, err
}
