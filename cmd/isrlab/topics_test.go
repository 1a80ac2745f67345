package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/broker"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// standaloneBroker runs a broker in this process for CLI tests.
func standaloneBroker(t *testing.T) string {
	t.Helper()
	cfg, _, err := kafkaconfig.Load("", []string{"log.dirs=" + t.TempDir(), "listeners=PLAINTEXT://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(cfg, broker.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-b.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("broker not ready")
	}
	return b.Addrs()[0]
}

func TestTopicsCommands(t *testing.T) {
	addr := standaloneBroker(t)
	bs := []string{"--bootstrap-server", addr}
	code, out := runCLI(t, append([]string{"topics", "create", "--topic", "t1", "--partitions", "3", "--config", "retention.ms=60000"}, bs...)...)
	if code != 0 || !strings.Contains(out, "Created topic t1.") {
		t.Fatalf("create: exit %d\n%s", code, out)
	}
	code, out = runCLI(t, append([]string{"topics", "describe", "--topic", "t1"}, bs...)...)
	if code != 0 || !strings.Contains(out, "Topic: t1\tPartitionCount: 3\tReplicationFactor: 1") || !strings.Contains(out, "\tTopic: t1\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0") {
		t.Fatalf("describe: exit %d\n%s", code, out)
	}
	code, out = runCLI(t, append([]string{"topics", "describe", "--topic", "t1", "--json"}, bs...)...)
	var js []topicJSON
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || len(js) != 1 || len(js[0].Partitions) != 3 {
		t.Fatalf("describe --json: exit %d\n%s", code, out)
	}
	code, out = runCLI(t, append([]string{"topics", "alter-config", "--topic", "t1", "--config", "retention.ms=120000"}, bs...)...)
	if code != 0 || !strings.Contains(out, "Updated config of topic t1.") {
		t.Fatalf("alter-config: exit %d\n%s", code, out)
	}
	if code, out = runCLI(t, append([]string{"topics", "alter-config", "--topic", "t1", "--config", "retention.ms=soon"}, bs...)...); code == 0 {
		t.Fatalf("invalid config value accepted:\n%s", out)
	}
	if code, out = runCLI(t, append([]string{"topics", "create", "--topic", "t1"}, bs...)...); code == 0 {
		t.Fatalf("duplicate topic accepted:\n%s", out)
	}
	code, out = runCLI(t, append([]string{"topics", "delete", "--topic", "t1"}, bs...)...)
	if code != 0 || !strings.Contains(out, "Deleted topic t1.") {
		t.Fatalf("delete: exit %d\n%s", code, out)
	}
	if code, _ := runCLI(t, append([]string{"topics", "describe", "--topic", "t1"}, bs...)...); code == 0 {
		t.Fatal("describe of a deleted topic succeeded")
	}
	if code, _ := runCLI(t, "topics", "create", "--topic", "x"); code != exitBadArgs {
		t.Fatalf("create without --bootstrap-server: exit %d, want %d", code, exitBadArgs)
	}
	if code, _ := runCLI(t, "topics", "create", "--bogus"); code != exitBadArgs {
		t.Fatalf("unknown flag: exit %d, want %d", code, exitBadArgs)
	}
}
