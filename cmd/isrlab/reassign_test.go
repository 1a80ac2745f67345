package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/broker"
	"github.com/isrlab/isrlab/broker/controller"
	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/coord/coordtest"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// clusterInProcess runs a coordinator and n brokers (with controllers) in
// this process and returns the bootstrap list.
func clusterInProcess(t *testing.T, n int) string {
	t.Helper()
	srv := coordtest.Start(t)
	ports := coordtest.FreePorts(t, n)
	var addrs []string
	for i := 1; i <= n; i++ {
		addr := fmt.Sprintf("127.0.0.1:%d", ports[i-1])
		addrs = append(addrs, addr)
		cfg, _, err := kafkaconfig.Load("", []string{
			fmt.Sprintf("broker.id=%d", i), "log.dirs=" + t.TempDir(), "listeners=PLAINTEXT://" + addr,
			"coordinator.connect=" + strings.Join(srv.ClientURLs(), ","), "coordinator.session.timeout.ms=3000",
			"replica.fetch.wait.max.ms=100", "controlled.shutdown.enable=false",
		})
		if err != nil {
			t.Fatal(err)
		}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		b, err := broker.New(cfg, broker.WithLogger(log), broker.WithController(func(b *broker.Broker, c *coord.Client) broker.Controller {
			return controller.New(controller.Config{BrokerID: b.ID(), Coord: c, Broker: cfg, Logger: log})
		}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		<-b.Ready()
	}
	bootstrap := strings.Join(addrs, ",")
	proctest.Eventually(t, 20*time.Second, "brokers in metadata", func() error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
		if err != nil || len(m.Brokers) != n || m.Controller < 0 {
			return fmt.Errorf("%d brokers, controller %d: %v", len(m.Brokers), m.Controller, err)
		}
		return nil
	})
	return bootstrap
}

// TestTopicsReassign drives `isrlab topics reassign` as
// kafka-reassign-partitions.sh is used: generate a plan, execute it, verify
// until complete, and roll back with the printed current assignment.
func TestTopicsReassign(t *testing.T) {
	bs := []string{"--bootstrap-server", clusterInProcess(t, 3)}
	dir := t.TempDir()
	if code, out := runCLI(t, append([]string{"topics", "create", "--topic", "mv", "--partitions", "2", "--replication-factor", "2"}, bs...)...); code != 0 {
		t.Fatalf("create: exit %d\n%s", code, out)
	}
	for _, addr := range strings.Split(bs[1], ",") {
		proctest.Eventually(t, 20*time.Second, "topic known to "+addr, func() error {
			if code, out := runCLI(t, "topics", "describe", "--topic", "mv", "--bootstrap-server", addr); code != 0 || strings.Contains(out, "Leader: none") {
				return fmt.Errorf("exit %d: %s", code, out)
			}
			return nil
		})
	}
	move := filepath.Join(dir, "move.json")
	os.WriteFile(move, []byte(`{"topics":[{"topic":"mv"}],"version":1}`), 0o644)
	var code int
	var out string
	proctest.Eventually(t, 20*time.Second, "generate", func() error {
		code, out = runCLI(t, append([]string{"topics", "reassign", "--generate", "--topics-to-move-json-file", move, "--broker-list", "2,3", "--seed", "1"}, bs...)...)
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		return nil
	})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || lines[0] != "Current partition replica assignment" || lines[3] != "Proposed partition reassignment configuration" {
		t.Fatalf("generate output:\n%s", out)
	}
	var proposed reassignmentJSON
	if err := json.Unmarshal([]byte(lines[4]), &proposed); err != nil || len(proposed.Partitions) != 2 {
		t.Fatalf("proposal %q: %v", lines[4], err)
	}
	for _, p := range proposed.Partitions {
		if len(p.Replicas) != 2 || slices.Contains(p.Replicas, 1) {
			t.Fatalf("proposal puts %v on broker 1 or changes the replication factor", p)
		}
	}
	plan := filepath.Join(dir, "plan.json")
	os.WriteFile(plan, []byte(lines[4]), 0o644)

	code, out = runCLI(t, append([]string{"topics", "reassign", "--execute", "--reassignment-json-file", plan}, bs...)...)
	if code != 0 || !strings.Contains(out, "Successfully started partition reassignments for mv-0,mv-1") || !strings.Contains(out, "Save this to use as the --reassignment-json-file option during rollback") {
		t.Fatalf("execute: exit %d\n%s", code, out)
	}
	var rollback string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "{") {
			rollback = l
		}
	}
	proctest.Eventually(t, 30*time.Second, "verify completes", func() error {
		code, out = runCLI(t, append([]string{"topics", "reassign", "--verify", "--reassignment-json-file", plan}, bs...)...)
		if code != 0 || strings.Count(out, "is completed.") != 2 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		return nil
	})
	// --verify asks the controller; describe may reach a broker whose
	// metadata has not yet had the controller's update.
	proctest.Eventually(t, 30*time.Second, "describe shows the planned replicas", func() error {
		code, out = runCLI(t, append([]string{"topics", "describe", "--topic", "mv", "--json"}, bs...)...)
		var js []topicJSON
		if code != 0 || json.Unmarshal([]byte(out), &js) != nil || len(js) != 1 {
			return fmt.Errorf("describe: exit %d\n%s", code, out)
		}
		for _, p := range js[0].Partitions {
			if !slices.Equal(p.Replicas, proposed.Partitions[p.Partition].Replicas) {
				return fmt.Errorf("partition %d replicas %v, planned %v", p.Partition, p.Replicas, proposed.Partitions[p.Partition].Replicas)
			}
		}
		return nil
	})
	if code, out = runCLI(t, append([]string{"topics", "reassign", "--list"}, bs...)...); code != 0 || !strings.Contains(out, "No partition reassignments found.") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}

	// Roll back with the saved assignment.
	back := filepath.Join(dir, "rollback.json")
	os.WriteFile(back, []byte(rollback), 0o644)
	if code, out = runCLI(t, append([]string{"topics", "reassign", "--execute", "--reassignment-json-file", back}, bs...)...); code != 0 {
		t.Fatalf("rollback: exit %d\n%s", code, out)
	}
	proctest.Eventually(t, 30*time.Second, "rollback completes", func() error {
		code, out = runCLI(t, append([]string{"topics", "reassign", "--verify", "--reassignment-json-file", back}, bs...)...)
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		return nil
	})

	// Usage errors.
	for _, args := range [][]string{
		{"topics", "reassign"},
		{"topics", "reassign", "--execute", "--verify", "--reassignment-json-file", plan},
		{"topics", "reassign", "--execute"},
		{"topics", "reassign", "--generate", "--broker-list", "1"},
	} {
		if code, out := runCLI(t, append(args, bs...)...); code != exitBadArgs {
			t.Errorf("%v: exit %d, want %d\n%s", args, code, exitBadArgs, out)
		}
	}
}
