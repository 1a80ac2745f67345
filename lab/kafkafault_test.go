package lab_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/lab"
	"github.com/isrlab/isrlab/results"
)

// TestRunKafkaFault runs the library's kafka/lost-produce-responses
// shortened, end to end on the netns backend: the brokers sit behind
// their Kafka proxies (each broker listens on its loopback, the proxy on
// its advertised address), the proxies drop Produce responses while the
// fault is in, the producers without idempotence retry, and the checker
// finds the retried records appended twice, nothing lost. The fault's
// start and stop are in the history, and nothing of the run is left.
func TestRunKafkaFault(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	sc, err := lab.Resolve("kafka/lost-produce-responses")
	if err != nil {
		t.Fatal(err)
	}
	sc.Duration, sc.Seed = 12*time.Second, 5
	sc.Faults[0].At, sc.Faults[0].HealAfter = 2*time.Second, 6*time.Second
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	res, _ := runLogged(t, bin, sc)
	v := res.Verdict
	if v.Anomalies["duplicate"] == 0 || v.Anomalies["lost-write"] != 0 || v.Valid != checker.Invalid {
		t.Fatalf("want duplicates and nothing lost; verdict %v, anomalies %v", v.Valid, v.Anomalies)
	}
	if res.Judgement.Outcome != lab.Met {
		t.Errorf("outcome %v, want met", res.Judgement)
	}
	props, err := os.ReadFile(filepath.Join(res.Dir, "nodes", "b1", "server.properties"))
	if err != nil || !strings.Contains(string(props), "\nlisteners=PLAINTEXT://127.0.0.1:") {
		t.Errorf("b1 does not listen behind its proxy: %s %v", props, err)
	}
	hist, err := os.ReadFile(filepath.Join(res.Dir, results.HistoryFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{`"start-kafka"`, `"stop-kafka"`} {
		if !strings.Contains(string(hist), op) {
			t.Errorf("the history has no %s op", op)
		}
	}
	if l := leftovers(t, res.RunID); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}
