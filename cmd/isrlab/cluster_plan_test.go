package main

import (
	"strings"
	"testing"
)

// TestClusterUpPlan: cluster up --plan checks a layout and prints it
// without creating anything (no Docker daemon, no root needed): a
// system kafka Docker cluster's containers, a refusal as a usage error.
func TestClusterUpPlan(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"cluster", "up", "--backend", "docker", "--system", "kafka", "--name", "kplan", "--brokers", "3",
			"--config", "min.insync.replicas=2", "--plan"}, exitValid,
			[]string{"docker cluster kplan: run ", "system kafka", "b3  process isrlab-", "image apache/kafka:3.9.1",
				"env: KAFKA_MIN_INSYNC_REPLICAS=2", "env: KAFKA_CONTROLLER_QUORUM_VOTERS=1@", "no coordinators"}},
		{[]string{"cluster", "up", "--backend", "docker", "--system", "kafka", "--kafka-image", "apache/kafka:4.0.0", "--plan"}, exitValid,
			[]string{"brokers run apache/kafka:4.0.0"}},
		{[]string{"cluster", "up", "--backend", "docker", "--system", "kafka", "--coordinators", "1", "--brokers", "0", "--plan"}, exitBadArgs,
			[]string{"system kafka needs at least one broker"}},
		{[]string{"cluster", "up", "--backend", "docker", "--system", "kafka", "--faultfs", "all", "--plan"}, exitBadArgs,
			[]string{"faultfs disks"}},
		{[]string{"cluster", "up", "--backend", "docker", "--plan", "--brokers", "2"}, exitValid,
			[]string{"system isrlab", "b2  process isrlab-", "command: /isrlab broker"}},
		{[]string{"cluster", "up", "--plan", "--brokers", "1", "--coordinators", "1"}, exitValid,
			[]string{"netns cluster isrlab: run ", "b1  broker at "}},
		{[]string{"cluster", "up", "--plan", "--secured", "--brokers", "1", "--coordinators", "1"}, exitValid,
			[]string{"secured: one SASL_SSL listener per broker (SCRAM-SHA-512)", "users admin and client"}},
		{[]string{"cluster", "up", "--backend", "docker", "--secured", "--plan", "--brokers", "1", "--coordinators", "1"}, exitValid,
			[]string{"secured: one SASL_SSL listener per broker (SCRAM-SHA-512)", "/tls:", "/secrets-", ":ro"}},
		{[]string{"cluster", "up", "--backend", "docker", "--system", "kafka", "--secured", "--plan"}, exitBadArgs,
			[]string{"--secured: system kafka", "isrlab brokers only"}},
	} {
		code, out := runCLI(t, tc.args...)
		if code != tc.code {
			t.Errorf("isrlab %v: exit %d, want %d:\n%s", tc.args, code, tc.code, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("isrlab %v: no %q in:\n%s", tc.args, w, out)
			}
		}
		if strings.Contains(out, "is up after") {
			t.Errorf("isrlab %v brought a cluster up", tc.args)
		}
	}
}
