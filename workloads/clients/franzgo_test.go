package clients

import (
	"strings"
	"testing"

	"github.com/isrlab/isrlab/workloads"
)

// TestFranzGoGroupProtocol: franz-go's client.config takes group.protocol
// and group.remote.assignor on the queue and txn workloads only, and on
// the txn workload group.protocol consumer only with txn.group.id; the
// refusals come when the scenario is checked.
func TestFranzGoGroupProtocol(t *testing.T) {
	consumer := map[string]string{"group.protocol": "consumer", "group.remote.assignor": "range"}
	grouped := workloads.Config{TxnConfig: workloads.TxnConfig{TxnGroup: "etl"}}
	for _, tc := range []struct {
		kind string
		own  map[string]string
		cfg  workloads.Config
		want string
	}{
		{"queue", consumer, workloads.Config{}, ""},
		{"txn", consumer, grouped, ""},
		{"txn", map[string]string{"group.protocol": "classic"}, workloads.Config{}, ""},
		{"txn", consumer, workloads.Config{}, "client franz-go: client.config: group.protocol consumer: the txn workload is in a consumer group only with txn.group.id"},
		{"txn", map[string]string{"group.protocol": "eager"}, grouped, `client franz-go: client.config: group.protocol "eager": use classic or consumer`},
		{"txn", map[string]string{"group.remote.assignor": "range"}, grouped, "group.remote.assignor range needs group.protocol consumer"},
		{"txn", map[string]string{"group.protocol": "consumer", "linger": "5ms"}, grouped, "client franz-go: client.config.linger: franz-go takes the workload's Kafka-named keys"},
		{"", consumer, workloads.Config{}, "client franz-go: client.config.group.protocol: franz-go takes the workload's Kafka-named keys (acks, enable.idempotence, retries, max.in.flight.requests.per.connection, request.timeout, delivery.timeout, linger) and, for the queue and txn workloads, group.protocol and group.remote.assignor"},
		{"rate", map[string]string{"group.protocol": "consumer"}, workloads.Config{}, "client franz-go: client.config.group.protocol: franz-go takes"},
	} {
		err := Check(workloads.ClientSpec{Config: tc.own}, tc.kind, tc.cfg)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s %v %+v: err = %v, want %q", tc.kind, tc.own, tc.cfg.TxnConfig, err, tc.want)
		}
	}
}
