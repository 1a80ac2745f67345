package main

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestLeadersElectArguments(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no election type", []string{"--all-topic-partitions"}},
		{"unknown election type", []string{"--election-type", "random", "--all-topic-partitions"}},
		{"no partitions chosen", []string{"--election-type", "preferred"}},
		{"topic without partition", []string{"--election-type", "preferred", "--topic", "t"}},
		{"partition without topic", []string{"--election-type", "preferred", "--partition", "0"}},
		{"all and a topic", []string{"--election-type", "preferred", "--all-topic-partitions", "--topic", "t", "--partition", "0"}},
		{"negative partition", []string{"--election-type", "unclean", "--topic", "t", "--partition", "-2"}},
		{"no bootstrap server", nil},
		{"stray argument", []string{"--election-type", "preferred", "--all-topic-partitions", "extra"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"leaders", "elect"}, tc.args...)
			if tc.args != nil {
				args = append(args, "--bootstrap-server", "127.0.0.1:1")
			} else {
				args = append(args, "--election-type", "preferred", "--all-topic-partitions")
			}
			if code, out := runCLI(t, args...); code != exitBadArgs {
				t.Errorf("exit %d, want %d; output:\n%s", code, exitBadArgs, out)
			}
		})
	}
}

func TestPrintElections(t *testing.T) {
	res := kadm.ElectLeadersResults{
		"b": {0: {Topic: "b", Partition: 0, Err: kerr.PreferredLeaderNotAvailable}},
		"a": {
			1: {Topic: "a", Partition: 1, Err: kerr.ElectionNotNeeded},
			0: {Topic: "a", Partition: 0},
			2: {Topic: "a", Partition: 2, Err: kerr.UnknownTopicOrPartition, ErrMessage: "no such partition"},
		},
	}
	for _, tc := range []struct {
		how    kadm.ElectLeadersHow
		want   string
		failed int
	}{
		{kadm.ElectPreferredReplica, `Successfully completed leader election (PREFERRED) for partitions a-0
Valid replica already elected for partitions a-1
Error completing leader election (PREFERRED) for partition: a-2: UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition.: no such partition
Error completing leader election (PREFERRED) for partition: b-0: PREFERRED_LEADER_NOT_AVAILABLE: The preferred leader was not available
`, 2},
		{kadm.ElectLiveReplica, `Successfully completed leader election (UNCLEAN) for partitions a-0
Valid replica already elected for partitions a-1
Error completing leader election (UNCLEAN) for partition: a-2: UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition.: no such partition
Error completing leader election (UNCLEAN) for partition: b-0: PREFERRED_LEADER_NOT_AVAILABLE: The preferred leader was not available
`, 2},
	} {
		var b bytes.Buffer
		failed := printElections(&b, tc.how, res)
		if b.String() != tc.want || failed != tc.failed {
			t.Errorf("how %d: got (%d failed)\n%s\nwant (%d failed)\n%s", tc.how, failed, b.String(), tc.failed, tc.want)
		}
	}
}
