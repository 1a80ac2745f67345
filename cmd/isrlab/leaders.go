package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

func init() { rootCmd.AddCommand(newLeadersCmd()) }

func newLeadersCmd() *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "leaders",
		Short: "Partition leadership tools (like kafka-leader-election.sh)",
		Long: `Partition leadership tools for any Kafka-compatible cluster (2.4+ for
unclean elections), shaped like Kafka's kafka-leader-election.sh.`,
		Example: `  isrlab leaders elect --bootstrap-server 127.0.0.1:9092 --election-type preferred --all-topic-partitions
  isrlab leaders elect --bootstrap-server 127.0.0.1:9092 --election-type unclean --topic t --partition 0`,
	}
	af.register(cmd)

	var (
		electionType string
		all          bool
		topic        string
		partition    int32
	)
	elect := &cobra.Command{
		Use:   "elect --election-type preferred|unclean (--all-topic-partitions | --topic T --partition P)",
		Short: "Run preferred or unclean leader elections through the controller (ElectLeaders)",
		Long: `Ask the controller to elect leaders with the ElectLeaders API.

preferred: move leadership back to each partition's preferred replica (the
first in its assignment) when that replica is live and in the ISR.
unclean: give partitions without a live leader the first live replica as
leader even if it is not in the ISR — acknowledged writes can be lost.

One line is printed per partition, as kafka-leader-election.sh does. The
command fails (exit 255) when any election failed; "already elected"
results are not failures.`,
		Example: `  isrlab leaders elect --bootstrap-server 127.0.0.1:9092 --election-type preferred --all-topic-partitions
  isrlab leaders elect --bootstrap-server 127.0.0.1:9092 --election-type unclean --topic t --partition 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var how kadm.ElectLeadersHow
			switch strings.ToLower(electionType) {
			case "preferred":
				how = kadm.ElectPreferredReplica
			case "unclean":
				how = kadm.ElectLiveReplica
			case "":
				return usageError("--election-type is required (preferred or unclean)")
			default:
				return usageError("--election-type %q: expected preferred or unclean", electionType)
			}
			partitionSet := cmd.Flags().Changed("partition")
			switch {
			case all && (topic != "" || partitionSet):
				return usageError("--all-topic-partitions cannot be combined with --topic or --partition")
			case !all && (topic == "" || !partitionSet):
				return usageError("give --all-topic-partitions, or --topic and --partition")
			case partitionSet && partition < 0:
				return usageError("--partition %d: must be >= 0", partition)
			}
			var set kadm.TopicsSet
			if !all {
				set = kadm.TopicsSet{}
				set.Add(topic, partition)
			}
			return af.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				res, err := adm.ElectLeaders(ctx, how, set)
				if err != nil {
					return fmt.Errorf("elect leaders: %w", err)
				}
				if failed := printElections(cmd.OutOrStdout(), how, res); failed > 0 {
					return fmt.Errorf("leader election failed for %d partition(s)", failed)
				}
				return nil
			})
		},
	}
	elect.Flags().StringVar(&electionType, "election-type", "", "preferred or unclean")
	elect.Flags().BoolVar(&all, "all-topic-partitions", false, "elect leaders for every partition")
	elect.Flags().StringVar(&topic, "topic", "", "topic of the partition to elect a leader for")
	elect.Flags().Int32Var(&partition, "partition", -1, "partition to elect a leader for (with --topic)")

	cmd.AddCommand(elect)
	return cmd
}

// printElections writes one line per partition in kafka-leader-election.sh's
// wording and returns how many elections failed.
func printElections(w io.Writer, how kadm.ElectLeadersHow, res kadm.ElectLeadersResults) int {
	kind := "PREFERRED"
	if how == kadm.ElectLiveReplica {
		kind = "UNCLEAN"
	}
	var rs []kadm.ElectLeadersResult
	for _, ps := range res {
		for _, r := range ps {
			rs = append(rs, r)
		}
	}
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Topic != rs[j].Topic {
			return rs[i].Topic < rs[j].Topic
		}
		return rs[i].Partition < rs[j].Partition
	})
	failed := 0
	for _, r := range rs {
		name := fmt.Sprintf("%s-%d", r.Topic, r.Partition)
		switch {
		case r.Err == nil:
			fmt.Fprintf(w, "Successfully completed leader election (%s) for partitions %s\n", kind, name)
		case errors.Is(r.Err, kerr.ElectionNotNeeded):
			fmt.Fprintf(w, "Valid replica already elected for partitions %s\n", name)
		default:
			failed++
			msg := r.Err.Error()
			if r.ErrMessage != "" && !strings.Contains(msg, r.ErrMessage) {
				msg += ": " + r.ErrMessage
			}
			fmt.Fprintf(w, "Error completing leader election (%s) for partition: %s: %s\n", kind, name, msg)
		}
	}
	return failed
}
