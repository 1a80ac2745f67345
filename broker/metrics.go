package broker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/partition"
)

// metrics holds the broker's Prometheus metrics. Names follow Kafka's JMX
// names (kafka_<domain>_<Name>); a *PerSec meter is a counter whose rate
// Prometheus computes.
type metrics struct {
	reg *prometheus.Registry

	bytesIn, bytesOut, messagesIn prometheus.Counter
	badRequests                   prometheus.Counter
	requestTime                   *prometheus.HistogramVec
	requestTimeByKey              [128]prometheus.Observer
	requests                      *prometheus.CounterVec // per API and version
	// Fetch is split as Kafka's RequestMetrics split it.
	fetchFollowerTime, fetchConsumerTime prometheus.Observer
	lockWaitRead, lockWaitWrite          prometheus.Observer

	handlerBusy                        atomic.Int64 // ns the io threads spent handling requests
	handlerClock                       []threadClock
	networkBusy                        atomic.Int64 // ns the connections spent reading and writing
	handlerIdleMeter, networkIdleMeter idleMeter

	replica replicaMetrics
	// maxLag reports the replica fetchers' MaxLag once they exist.
	maxLag atomic.Pointer[func() int64]
}

func newMetrics(b *Broker) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.bytesIn = prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_server_BytesInPerSec", Help: "Bytes received from clients (BrokerTopicMetrics)."})
	m.bytesOut = prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_server_BytesOutPerSec", Help: "Bytes sent to clients (BrokerTopicMetrics)."})
	m.messagesIn = prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_server_MessagesInPerSec", Help: "Records appended as leader (BrokerTopicMetrics)."})
	m.badRequests = prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_network_BadRequestsTotal", Help: "Connections closed on an undecodable or unsupported request."})
	m.requestTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kafka_network_RequestTotalTimeMs",
		Help:    "Time from receiving a request to sending its response, per API (RequestMetrics).",
		Buckets: []float64{0.1, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000, 30000},
	}, []string{"request"})
	for k := range m.requestTimeByKey {
		if name := kmsg.NameForKey(int16(k)); name != "" {
			m.requestTimeByKey[k] = m.requestTime.WithLabelValues(name)
		}
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kafka_network_RequestsPerSec",
		Help: "Requests decoded, per API and version (RequestMetrics, with KIP-272's version tag).",
	}, []string{"request", "version"})
	m.fetchFollowerTime = m.requestTime.WithLabelValues("FetchFollower")
	m.fetchConsumerTime = m.requestTime.WithLabelValues("FetchConsumer")
	lockWait := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kafka_cluster_Partition_LeaderIsrUpdateLockWaitTimeMs",
		Help:    "Time an acquisition of a partition's leaderIsrUpdateLock waited: read (produce, fetch, ListOffsets) or write (ISR and leadership changes). isrlab's own; Kafka has none.",
		Buckets: []float64{0.01, 0.1, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000},
	}, []string{"lock"})
	m.lockWaitRead, m.lockWaitWrite = lockWait.WithLabelValues("read"), lockWait.WithLabelValues("write")
	m.reg.MustRegister(lockWait)
	m.handlerClock = make([]threadClock, b.cfg.Int("num.io.threads"))
	handlerIdle := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kafka_server_RequestHandlerAvgIdlePercent",
		Help: "Fraction of time the num.io.threads handlers were idle over the last second (KafkaRequestHandlerPool).",
	}, func() float64 { return float64(m.handlerIdleMeter.percent.Load()) / 10000 })
	netIdle := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kafka_network_NetworkProcessorAvgIdlePercent",
		Help: "1 - time spent reading, decoding, encoding and writing requests / (num.network.threads x wall time), last second (SocketServer).",
	}, func() float64 { return float64(m.networkIdleMeter.percent.Load()) / 10000 })
	m.reg.MustRegister(m.bytesIn, m.bytesOut, m.messagesIn, m.badRequests, m.requestTime, m.requests, handlerIdle, netIdle)
	m.registerReplica()
	return m
}

// countRequest counts one decoded request.
func (m *metrics) countRequest(key, version int16) {
	m.requests.WithLabelValues(kmsg.NameForKey(key), strconv.Itoa(int(version))).Inc()
}

// observeRequest records a request's total time; a Fetch is also recorded
// as FetchFollower or FetchConsumer, Kafka's RequestMetrics names.
func (m *metrics) observeRequest(key int16, req kmsg.Request, d time.Duration) {
	ms := float64(d.Microseconds()) / 1000
	if key >= 0 && int(key) < len(m.requestTimeByKey) && m.requestTimeByKey[key] != nil {
		m.requestTimeByKey[key].Observe(ms)
	}
	if f, ok := req.(*kmsg.FetchRequest); ok {
		// The replica id moved into ReplicaState in v15.
		if f.ReplicaID >= 0 || (f.Version >= 15 && f.ReplicaState.ID >= 0) {
			m.fetchFollowerTime.Observe(ms)
		} else {
			m.fetchConsumerTime.Observe(ms)
		}
	}
}

// LockWait implements partition.LockStats.
func (m *metrics) LockWait(write bool, d time.Duration) {
	ms := float64(d.Nanoseconds()) / 1e6
	if write {
		m.lockWaitWrite.Observe(ms)
	} else {
		m.lockWaitRead.Observe(ms)
	}
}

// sampleLoop updates the idle gauges once a second.
func (m *metrics) sampleLoop(ctx context.Context, ioThreads, netThreads int) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	sample := func(now time.Time) {
		for i := range m.handlerClock {
			m.handlerClock[i].checkpoint(now.UnixNano(), &m.handlerBusy)
		}
		m.handlerIdleMeter.sample(m.handlerBusy.Load(), now, ioThreads)
		m.networkIdleMeter.sample(m.networkBusy.Load(), now, netThreads)
	}
	sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			sample(now)
		}
	}
}

// serve serves /metrics (and what extra registers) on ln until ctx ends.
func (m *metrics) serve(ctx context.Context, ln net.Listener, extra func(*http.ServeMux)) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	// Go's profiles (CPU, heap, goroutines) for finding what a large
	// cluster costs: go tool pprof http://<metrics.listen>/debug/pprof/heap.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	if extra != nil {
		extra(mux)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// threadClock measures one handler's busy time so that a request still
// running at a sample is counted up to the sample, not only when it ends:
// a handler stuck on a lock must read as busy.
type threadClock struct{ since atomic.Int64 } // busy since (unix ns); 0 idle

func (c *threadClock) begin(now int64) { c.since.Store(now) }

func (c *threadClock) end(now int64, total *atomic.Int64) {
	if s := c.since.Swap(0); s != 0 {
		total.Add(now - s)
	}
}

func (c *threadClock) checkpoint(now int64, total *atomic.Int64) {
	if s := c.since.Load(); s != 0 && c.since.CompareAndSwap(s, now) {
		total.Add(now - s)
	}
}

// Replication metrics (ReplicaManager) and partition gauges.
type replicaMetrics struct {
	isrShrinks, isrExpands, failedIsrUpdates prometheus.Counter
	underReplicated, underMinIsr, atMinIsr   prometheus.Gauge
	leaderCount, partitionCount              prometheus.Gauge
	stalled                                  prometheus.Gauge
}

func (m *metrics) registerReplica() {
	r := &m.replica
	r.isrShrinks = prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_server_IsrShrinksPerSec", Help: "ISR shrinks made by this broker as leader."})
	r.isrExpands = prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_server_IsrExpandsPerSec", Help: "ISR expansions made by this broker as leader."})
	r.failedIsrUpdates = prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_server_FailedIsrUpdatesPerSec", Help: "ISR updates skipped because the cached partition state was stale or rejected."})
	r.underReplicated = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_server_UnderReplicatedPartitions", Help: "Led partitions whose ISR is smaller than the replica set."})
	r.underMinIsr = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_cluster_UnderMinIsrPartitionCount", Help: "Led partitions whose ISR is below min.insync.replicas."})
	r.atMinIsr = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_cluster_AtMinIsrPartitionCount", Help: "Led partitions whose ISR equals min.insync.replicas."})
	r.leaderCount = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_server_LeaderCount", Help: "Partitions this broker leads."})
	r.partitionCount = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_server_PartitionCount", Help: "Partition replicas on this broker."})
	r.stalled = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_server_StalledFollowerPartitions", Help: "Led partitions with a follower that is alive and registered but has not fetched (a diverging-epoch answer does not count) for longer than replica.lag.time.max.ms: a stopped fetcher, not lag. isrlab's own; Kafka has none."})
	maxLag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kafka_server_ReplicaFetcherManager_MaxLag",
		Help: "Largest lag in records of any partition this broker follows: the leader HW minus the log end offset after the last fetch (FetcherLagMetrics).",
	}, func() float64 {
		if f := m.maxLag.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	m.reg.MustRegister(r.isrShrinks, r.isrExpands, r.failedIsrUpdates, r.underReplicated, r.underMinIsr, r.atMinIsr, r.leaderCount, r.partitionCount, r.stalled, maxLag)
}

// IsrShrink, IsrExpand and FailedIsrUpdate implement partition.Stats.
func (m *metrics) IsrShrink()       { m.replica.isrShrinks.Inc() }
func (m *metrics) IsrExpand()       { m.replica.isrExpands.Inc() }
func (m *metrics) FailedIsrUpdate() { m.replica.failedIsrUpdates.Inc() }

func (m *metrics) updatePartitionGauges(ps []*partition.Partition) {
	var under, belowMin, atMin, leaders float64
	for _, p := range ps {
		s := p.State()
		if s.Role != partition.Leader {
			continue
		}
		leaders++
		if len(s.ISR) < len(s.Replicas) {
			under++
		}
		minISR := p.MinInsyncReplicas()
		switch {
		case len(s.ISR) < minISR:
			belowMin++
		case len(s.ISR) == minISR:
			atMin++
		}
	}
	m.replica.underReplicated.Set(under)
	m.replica.underMinIsr.Set(belowMin)
	m.replica.atMinIsr.Set(atMin)
	m.replica.leaderCount.Set(leaders)
	m.replica.partitionCount.Set(float64(len(ps)))
}

// MetricsRegisterer returns the broker's Prometheus registry, for
// components (the controller) that export their own metrics.
func (b *Broker) MetricsRegisterer() prometheus.Registerer { return b.metrics.reg }
