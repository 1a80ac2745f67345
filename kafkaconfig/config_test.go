package kafkaconfig

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestLoadServerProperties(t *testing.T) {
	c, warns, err := Load("testdata/server.properties", []string{"num.partitions=6"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Int("broker.id"); got != 3 {
		t.Errorf("broker.id = %d, want 3", got)
	}
	if got := c.List("listeners"); !reflect.DeepEqual(got, []string{"PLAINTEXT://127.0.0.1:19092"}) {
		t.Errorf("listeners = %v", got)
	}
	if got := c.LogDirs(); !reflect.DeepEqual(got, []string{"/var/lib/isrlab/a", "/var/lib/isrlab/b"}) {
		t.Errorf("log.dirs = %v", got)
	}
	if got := c.Int("num.io.threads"); got != 4 {
		t.Errorf("num.io.threads = %d", got)
	}
	if got := c.RetentionMs(); got != 90*60*1000 {
		t.Errorf("retention ms = %d", got)
	}
	if got := c.Int("num.partitions"); got != 6 {
		t.Errorf("num.partitions = %d", got)
	}
	if len(warns) != 1 || warns[0].Key != "no.such.key" || !strings.HasSuffix(warns[0].Source, ":9") {
		t.Errorf("warnings = %v", warns)
	}
}

func TestDefaultsAreKafkas(t *testing.T) {
	c := NewBroker()
	for key, want := range map[string]string{
		"log.segment.bytes":               "1073741824",
		"log.retention.hours":             "168",
		"num.io.threads":                  "8",
		"num.network.threads":             "3",
		"queued.max.requests":             "500",
		"socket.request.max.bytes":        "104857600",
		"message.max.bytes":               "1048588",
		"log.retention.check.interval.ms": "300000",
		"replica.fetch.wait.max.ms":       "500",
		"coordinator.session.timeout.ms":  "18000",
		"offsets.topic.num.partitions":    "50",
	} {
		if got := c.String(key); got != want {
			t.Errorf("%s default = %s, want %s", key, got, want)
		}
	}
	if c.RetentionMs() != 168*3600*1000 {
		t.Errorf("retention = %d", c.RetentionMs())
	}
}

func TestInvalidValueNamesKeyAndValue(t *testing.T) {
	for _, o := range []string{"num.io.threads=zero", "num.io.threads=0", "auto.create.topics.enable=maybe", "log.message.timestamp.type=Now"} {
		_, _, err := Load("", append([]string{"log.dirs=/tmp/x"}, o))
		var inv *InvalidError
		if !errors.As(err, &inv) {
			t.Fatalf("%s: err = %v, want InvalidError", o, err)
		}
		k, v, _ := strings.Cut(o, "=")
		if inv.Key != k || inv.Value != v || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), v) {
			t.Errorf("%s: error %q does not name key and value", o, err)
		}
	}
	if _, _, err := Load("", []string{"noequals"}); err == nil {
		t.Error("override without = accepted")
	}
}

func TestTopicOverrides(t *testing.T) {
	c, _, err := Load("", []string{"log.dirs=/x", "log.segment.bytes=2048", "min.insync.replicas=2"})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := c.TopicConfig(map[string]string{"retention.ms": "1000"})
	if err != nil {
		t.Fatal(err)
	}
	if tc.Long("segment.bytes") != 2048 || tc.Long("retention.ms") != 1000 || tc.Int("min.insync.replicas") != 2 {
		t.Errorf("topic config: segment.bytes=%d retention.ms=%d min.isr=%d", tc.Long("segment.bytes"), tc.Long("retention.ms"), tc.Int("min.insync.replicas"))
	}
	if _, err := c.TopicConfig(map[string]string{"segment.bytes": "x"}); err == nil {
		t.Error("invalid topic value accepted")
	}
	if _, err := c.TopicConfig(map[string]string{"bogus": "1"}); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown topic key: %v", err)
	}
}

func TestParsePropertiesEscapes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.properties")
	os.WriteFile(p, []byte("a\\ b=c\\td\nkey\n"), 0o644)
	f, _ := os.Open(p)
	defer f.Close()
	props, err := ParseProperties(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Property{{Key: "a b", Value: "c\td", Line: 1}, {Key: "key", Value: "", Line: 2}}
	if !reflect.DeepEqual(props, want) {
		t.Errorf("got %+v", props)
	}
}

func TestProfiles(t *testing.T) {
	for _, tc := range []struct {
		profile, truncation, isrUpdate, lag, unclean string
	}{
		{"0.10", "hw", "sync-under-lock-always", "10000", "true"},
		{"2.4", "epoch", "sync-under-lock-always", "10000", "false"},
		{"2.6", "epoch", "sync-under-lock-checked", "30000", "false"},
		{"3.7", "diverging-epoch-fetch", "async-alter-partition", "30000", "false"},
	} {
		c, _, err := Load("", []string{"log.dirs=/x", "kafka.profile=" + tc.profile})
		if err != nil {
			t.Fatal(err)
		}
		got := []string{c.String("replication.truncation"), c.String("isr.update"), c.String("replica.lag.time.max.ms"), c.String("unclean.leader.election.enable")}
		want := []string{tc.truncation, tc.isrUpdate, tc.lag, tc.unclean}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("profile %s: %v, want %v", tc.profile, got, want)
		}
		if fencing := c.String("fetch.leader-epoch-fencing"); fencing != map[bool]string{true: "false", false: "true"}[tc.profile == "0.10"] {
			t.Errorf("profile %s: fetch.leader-epoch-fencing=%s (KIP-320 came in 2.1)", tc.profile, fencing)
		}
		if tc.profile == "0.10" && c.TopicDefaults().String("unclean.leader.election.enable") != "true" {
			t.Error("0.10 topic default for unclean election is not true")
		}
	}
	// A key set alone wins over the profile.
	c, _, err := Load("", []string{"log.dirs=/x", "kafka.profile=0.10", "replication.truncation=epoch"})
	if err != nil {
		t.Fatal(err)
	}
	if c.String("replication.truncation") != "epoch" || c.String("isr.update") != "sync-under-lock-always" {
		t.Errorf("override lost: %s %s", c.String("replication.truncation"), c.String("isr.update"))
	}
}

// TestELRNeedsItsSafeguards: eligible leader replicas load under the 3.7
// profile and are refused where the ISR changes without the controller or
// the high watermark advances below min ISR, naming the key.
func TestELRNeedsItsSafeguards(t *testing.T) {
	for _, tc := range []struct {
		overrides []string
		want      string // "" loads
	}{
		{[]string{"eligible.leader.replicas.enable=true"}, ""},
		{[]string{"eligible.leader.replicas.enable=false", "kafka.profile=0.10"}, ""},
		{[]string{"eligible.leader.replicas.enable=true", "kafka.profile=2.4"}, "needs isr.update=async-alter-partition"},
		{[]string{"eligible.leader.replicas.enable=true", "isr.update=sync-under-lock-checked"}, "not sync-under-lock-checked"},
		{[]string{"eligible.leader.replicas.enable=true", "hw.requires-min-isr=false"}, "needs hw.requires-min-isr=true"},
		{[]string{"eligible.leader.replicas.enable=true", "kafka.profile=2.6", "isr.update=async-alter-partition", "hw.requires-min-isr=true"}, ""},
	} {
		c, _, err := Load("", append([]string{"log.dirs=/x"}, tc.overrides...))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.overrides, err)
		case tc.want == "" && c.Bool("eligible.leader.replicas.enable") != slices.Contains(tc.overrides, "eligible.leader.replicas.enable=true"):
			t.Errorf("%v: eligible.leader.replicas.enable=%v", tc.overrides, c.Bool("eligible.leader.replicas.enable"))
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "eligible.leader.replicas.enable")):
			t.Errorf("%v: %v, want an error naming eligible.leader.replicas.enable: %s", tc.overrides, err, tc.want)
		}
	}
	// Scenario keys are checked before any profile is applied.
	c := NewBroker()
	for _, kv := range [][2]string{{"kafka.profile", "0.10"}, {"eligible.leader.replicas.enable", "true"}} {
		if err := c.Set(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckELR(c); err == nil {
		t.Error("ELR under the 0.10 profile's ISR updates was accepted")
	}
}

// TestKRaftNeedsItsQuorum: a KRaft broker (kafka.profile 4.0) needs
// controller.quorum.voters, well formed, and ISR updates through
// AlterPartition; process.roles set empty keeps a broker in the
// ZooKeeper era under the 4.0 profile.
func TestKRaftNeedsItsQuorum(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{[]string{"kafka.profile=4.0"}, "needs controller.quorum.voters"},
		{[]string{"kafka.profile=4.0", "controller.quorum.voters=3001@h:9093,x"}, `"x" is not id@host:port`},
		{[]string{"kafka.profile=4.0", "controller.quorum.voters=3001@h"}, "is not id@host:port"},
		{[]string{"kafka.profile=4.0", "controller.quorum.voters=3001@h:9093", "isr.update=sync-under-lock-checked"}, "needs isr.update=async-alter-partition"},
		{[]string{"kafka.profile=4.0", "controller.quorum.voters=3001@h:9093,3002@h2:9093"}, ""},
		{[]string{"kafka.profile=4.0", "process.roles="}, ""},
		{[]string{"kafka.profile=3.7", "process.roles=broker", "controller.quorum.voters=1@h:1"}, ""},
	} {
		c, _, err := Load("", append([]string{"log.dirs=/x"}, tc.keys...))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.keys, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: err %v, want %q", tc.keys, err, tc.want)
		case err == nil && c.String("kafka.profile") == "4.0" && c.String("process.roles") != map[bool]string{true: "", false: "broker"}[strings.Contains(strings.Join(tc.keys, " "), "process.roles=")]:
			t.Errorf("%v: process.roles=%q", tc.keys, c.String("process.roles"))
		}
	}
}
