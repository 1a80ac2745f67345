package controller

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's Kafka metrics (KafkaController and
// ControllerStats); a *PerSec meter is a counter whose rate Prometheus
// computes.
type metrics struct {
	active    prometheus.Gauge
	offline   prometheus.Gauge
	global    prometheus.Gauge
	imbalance prometheus.Gauge
	unclean   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		active:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_controller_ActiveControllerCount", Help: "1 on the broker that is the active controller, else 0 (KafkaController)."}),
		offline:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_controller_OfflinePartitionsCount", Help: "Partitions without a live leader, as seen by the active controller (KafkaController)."}),
		global:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_controller_GlobalPartitionCount", Help: "Partitions in the cluster, as seen by the active controller (KafkaController)."}),
		imbalance: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_controller_PreferredReplicaImbalanceCount", Help: "Partitions not led by their preferred replica, as seen by the active controller (KafkaController)."}),
		unclean:   prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_controller_UncleanLeaderElectionsPerSec", Help: "Leaders elected from outside the ISR (ControllerStats)."}),
	}
	if reg == nil {
		return m
	}
	// A registry shared by several controllers (one per broker in one
	// process) keeps the first set of collectors.
	register := func(c prometheus.Collector) prometheus.Collector {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return are.ExistingCollector
			}
		}
		return c
	}
	if g, ok := register(m.active).(prometheus.Gauge); ok {
		m.active = g
	}
	if g, ok := register(m.offline).(prometheus.Gauge); ok {
		m.offline = g
	}
	if g, ok := register(m.global).(prometheus.Gauge); ok {
		m.global = g
	}
	if g, ok := register(m.imbalance).(prometheus.Gauge); ok {
		m.imbalance = g
	}
	if c, ok := register(m.unclean).(prometheus.Counter); ok {
		m.unclean = c
	}
	return m
}
