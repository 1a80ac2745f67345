package lab_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/lab"
	"github.com/isrlab/isrlab/workloads"
	"github.com/isrlab/isrlab/workloads/clients"
)

// TestClientsLeaderKill runs the embedded default (the safe preset: acks=all,
// idempotence, min.insync.replicas=2; the leader of partition 0 killed and
// restarted) through each client other than franz-go, whose run is
// TestRunDefaultScenario: the history is valid and the expectation met.
// kafka-go and kafka-python have no idempotent producer: they run acks=all
// without, where a retry may duplicate a record, and nothing else may go
// wrong. librdkafka and kafka-python run as the Python exec drivers, in the
// client host's namespace.
func TestClientsLeaderKill(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	for _, spec := range []workloads.ClientSpec{
		{Client: "sarama"},
		{Client: "kafka-go"},
		{Client: clients.Librdkafka},
		{Client: clients.KafkaPython},
		{Client: "exec", Exec: []string{proctest.Build(t, "./examples/exec-driver")}},
	} {
		t.Run(spec.Client, func(t *testing.T) {
			if spec.Client == clients.Librdkafka || spec.Client == clients.KafkaPython {
				if _, missing := clients.PythonVersion(spec.Client); missing != "" {
					t.Skipf("client %s needs %s", spec.Client, missing)
				}
			}
			noIdempotence := spec.Client == "kafka-go" || spec.Client == clients.KafkaPython
			sc := lab.Default()
			sc.Name = "clients/" + spec.Client + "-leader-kill"
			sc.Workload.ClientSpec = spec
			if noIdempotence {
				sc.Workload.Idempotent = false
				sc.Expect = lab.Expect{Valid: "any"} // judged below: duplicates only
			}
			// The leader dies 4 s in and restarts 6 s later (the
			// library's 8 s and 10 s, shortened): the run ends 3 s after.
			sc.Faults[0].At, sc.Faults[0].HealAfter = 4*time.Second, 6*time.Second
			sc.Duration = 13 * time.Second
			sc.Seed = 7
			res, out := runLogged(t, bin, sc)
			if res.Judgement.Outcome != lab.Met {
				t.Fatalf("verdict %v, anomalies %v, outcome %v", res.Verdict.Valid, res.Verdict.Anomalies, res.Judgement)
			}
			for k, n := range res.Verdict.Anomalies {
				if n > 0 && !(noIdempotence && k == checker.Duplicate) {
					t.Errorf("%d %s", n, k)
				}
			}
			if !noIdempotence && res.Verdict.Valid != checker.Valid {
				t.Errorf("verdict %v", res.Verdict.Valid)
			}
			if !regexp.MustCompile(`kill leader:isrlab/0 -> b\d`).MatchString(out) {
				t.Errorf("the fault did not run: %s", out)
			}
			hist, err := os.ReadFile(filepath.Join(res.Dir, "history.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			acked := regexp.MustCompile(`"type":"ok","f":"send"`).FindAll(hist, -1)
			polled := regexp.MustCompile(`"type":"ok","f":"poll","offsets":\{"\d`).FindAll(hist, -1)
			if len(acked) < 100 || len(polled) == 0 {
				t.Errorf("%d acknowledged sends and %d polls with records through %s", len(acked), len(polled), spec.Client)
			}
		})
	}
}

// TestSaramaConsumerCrash runs the library's consumer-crash/manual-commit
// through sarama (its group consumers committing with MarkOffset and
// Commit, crashing without a commit), shortened to 15 s: the history is
// valid, the expectation (skipped 0) met, members crashed, and the
// crashes redelivered what was processed and not yet committed
// (at-least-once).
func TestSaramaConsumerCrash(t *testing.T) {
	needRoot(t)
	sc, err := lab.Lookup("consumer-crash/manual-commit")
	if err != nil {
		t.Fatal(err)
	}
	sc.Workload.ClientSpec = workloads.ClientSpec{Client: clients.Sarama}
	consumerCrash(t, sc)
}

// TestLibrdkafkaConsumerCrash runs the library's
// consumer-crash/manual-commit-librdkafka (the exec protocol's queue
// feature, asked for in the driver's hello) as TestSaramaConsumerCrash.
func TestLibrdkafkaConsumerCrash(t *testing.T) {
	needRoot(t)
	if _, missing := clients.PythonVersion(clients.Librdkafka); missing != "" {
		t.Skipf("client %s needs %s", clients.Librdkafka, missing)
	}
	sc, err := lab.Lookup("consumer-crash/manual-commit-librdkafka")
	if err != nil {
		t.Fatal(err)
	}
	consumerCrash(t, sc)
}

// TestKafkaPythonConsumerCrash runs the library's
// consumer-crash/manual-commit-kafka-python (kafka-python's KafkaConsumer
// over the exec protocol's queue feature) as TestSaramaConsumerCrash.
func TestKafkaPythonConsumerCrash(t *testing.T) {
	needRoot(t)
	if _, missing := clients.PythonVersion(clients.KafkaPython); missing != "" {
		t.Skipf("client %s needs %s", clients.KafkaPython, missing)
	}
	sc, err := lab.Lookup("consumer-crash/manual-commit-kafka-python")
	if err != nil {
		t.Fatal(err)
	}
	consumerCrash(t, sc)
}

// consumerCrash runs sc, a manual-commit consumer-crash scenario,
// shortened to 15 s, and checks its history is valid with skipped 0,
// redeliveries, crashes and ok commits.
func consumerCrash(t *testing.T, sc lab.Scenario) {
	t.Helper()
	bin := proctest.Binary(t)
	sc.Duration = 15 * time.Second
	sc.Seed = 7
	res, _ := runLogged(t, bin, sc)
	if res.Judgement.Outcome != lab.Met || res.Verdict.Valid != checker.Valid {
		t.Fatalf("verdict %v, anomalies %v, outcome %v", res.Verdict.Valid, res.Verdict.Anomalies, res.Judgement)
	}
	d := res.Verdict.Delivery
	if d == nil || len(d.Groups) != 1 {
		t.Fatalf("delivery %+v: want one group", d)
	}
	g := d.Groups[0]
	hist, err := os.ReadFile(filepath.Join(res.Dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	crashes := len(regexp.MustCompile(`"f":"crash"`).FindAll(hist, -1))
	t.Logf("processed %d (%d records), redelivered %d, skipped %d, %d commits, %d crashes", g.Processed, g.Records, g.Redelivered, g.Skipped, g.Commits, crashes)
	if g.Skipped != 0 || g.Redelivered == 0 || g.Commits == 0 || crashes == 0 {
		t.Errorf("skipped %d (want 0), redelivered %d, %d ok commits and %d crashes (want each > 0)", g.Skipped, g.Redelivered, g.Commits, crashes)
	}
}

// runLogged runs sc with the isrlab binary bin, logs what the run printed
// and returns its result and output; a run that could not complete fails
// the test.
func runLogged(t *testing.T, bin string, sc lab.Scenario) (lab.Result, string) {
	t.Helper()
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := lab.Run(ctx, sc, lab.Options{ResultsDir: t.TempDir(), Binary: bin, Out: &out})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	return res, out.String()
}
