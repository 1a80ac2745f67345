package docker

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/scripttest"
)

// TestPlanKafka: the plan of a system kafka cluster validates the layout
// without a Docker daemon and prints it (testdata/plan-kafka-3b.txt): the
// network, a sandbox and an apache/kafka KRaft process container per
// broker (no coordinators), with the user's broker config as KAFKA_ env.
func TestPlanKafka(t *testing.T) {
	top, err := compose.Build(compose.Options{RunID: "0123abcd", RunDir: "/run-dir", Binary: "/usr/local/bin/isrlab"})
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{System: SystemKafka, KafkaConf: []compose.KV{{Key: "min.insync.replicas", Value: "2"}}}
	var out strings.Builder
	if err := b.Plan(&out, top); err != nil {
		t.Fatal(err)
	}
	scripttest.Golden(t, filepath.Join("testdata", "plan-kafka-3b.txt"), out.String())
	for _, w := range []string{"KAFKA_PROCESS_ROLES=broker,controller", "KAFKA_MIN_INSYNC_REPLICAS=2", "image apache/kafka:3.9.1",
		"/run-dir/b3/data:/var/lib/kafka/data", "isrlab never pulls"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("plan lacks %q", w)
		}
	}
	if strings.Contains(out.String(), " c1 ") || strings.Count(out.String(), " process isrlab-0123abcd-") != 3 {
		t.Errorf("want 3 broker process containers and no coordinator:\n%s", out.String())
	}
}

// TestPlanRefuses: what Up refuses before it touches Docker, the plan
// refuses too.
func TestPlanRefuses(t *testing.T) {
	onlyCoords, _ := compose.Build(compose.Options{RunID: "0123abcd", RunDir: "/r", Binary: "/bin/isrlab", NoDefaults: true, Coordinators: 1, Clients: 1})
	disks, _ := compose.Build(compose.Options{RunID: "0123abcd", RunDir: "/r", Binary: "/bin/isrlab", FaultFS: []string{"all"}})
	gw, _ := compose.Build(compose.Options{RunID: "0123abcd", RunDir: "/r", Binary: "/bin/isrlab"})
	gw.Nodes[0].Addr = Gateway(gw.Subnet)
	secured, _ := compose.Build(compose.Options{RunID: "0123abcd", RunDir: "/r", Binary: "/bin/isrlab", Secured: true})
	for _, tc := range []struct {
		b    Backend
		t    compose.Topology
		want string
		is   error
	}{
		{Backend{System: "redpanda"}, gw, `system "redpanda"`, compose.ErrBadTopology},
		{Backend{System: SystemKafka}, onlyCoords, "needs at least one broker", compose.ErrBadTopology},
		{Backend{System: SystemKafka}, disks, "faultfs disks", errors.ErrUnsupported},
		{Backend{}, gw, "is Docker's gateway", compose.ErrBadTopology},
		{Backend{System: SystemKafka}, secured, "a secured cluster", errors.ErrUnsupported},
	} {
		err := tc.b.Plan(&strings.Builder{}, tc.t)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.want, err)
		}
	}
}
