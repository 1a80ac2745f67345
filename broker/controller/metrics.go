package controller

import "github.com/prometheus/client_golang/prometheus"

// metrics are the controller's Kafka metrics (KafkaController and
// ControllerStats); a *PerSec meter is a counter whose rate Prometheus
// computes.
type metrics struct {
	active  prometheus.Gauge
	offline prometheus.Gauge
	global  prometheus.Gauge
	unclean prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		active:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_controller_ActiveControllerCount", Help: "1 on the broker that is the active controller, else 0 (KafkaController)."}),
		offline: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_controller_OfflinePartitionsCount", Help: "Partitions without a live leader, as seen by the active controller (KafkaController)."}),
		global:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_controller_GlobalPartitionCount", Help: "Partitions in the cluster, as seen by the active controller (KafkaController)."}),
		unclean: prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_controller_UncleanLeaderElectionsPerSec", Help: "Leaders elected from outside the ISR (ControllerStats)."}),
	}
	if reg != nil {
		reg.MustRegister(m.active, m.offline, m.global, m.unclean)
	}
	return m
}
