package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/controller"
)

// reassignmentJSON is kafka-reassign-partitions.sh's file format.
type reassignmentJSON struct {
	Version    int                     `json:"version"`
	Partitions []reassignPartitionJSON `json:"partitions"`
}

type reassignPartitionJSON struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Replicas  []int32  `json:"replicas"`
	LogDirs   []string `json:"log_dirs,omitempty"`
}

// topicsToMoveJSON is the --topics-to-move-json-file format.
type topicsToMoveJSON struct {
	Version int `json:"version"`
	Topics  []struct {
		Topic string `json:"topic"`
	} `json:"topics"`
}

func newReassignCmd(af *adminFlags) *cobra.Command {
	var (
		file, topicsFile, brokerList          string
		execute, verify, generate, cancel, ls bool
		additional                            bool
		seed                                  int64
	)
	cmd := &cobra.Command{
		Use:   "reassign (--generate | --execute | --verify | --cancel | --list) ...",
		Short: "Move partition replicas between brokers (like kafka-reassign-partitions.sh)",
		Long: `Reassign partitions the way kafka-reassign-partitions.sh does, through
AlterPartitionReassignments and ListPartitionReassignments:

  --generate --topics-to-move-json-file F --broker-list 1,2,3
      print the current assignment and a proposed one over the brokers
  --execute --reassignment-json-file F [--additional]
      start the reassignment (prints the current assignment to roll back to)
  --verify --reassignment-json-file F
      report, per partition, whether it completed (exit 1 while any has not)
  --cancel --reassignment-json-file F
      cancel the reassignments of the file's partitions
  --list
      list the reassignments in progress

The reassignment file is {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]};
log_dirs may be given and must be "any".`,
		Example: `  isrlab topics reassign --bootstrap-server 127.0.0.1:9092 --generate --topics-to-move-json-file move.json --broker-list 2,3,4
  isrlab topics reassign --bootstrap-server 127.0.0.1:9092 --execute --reassignment-json-file plan.json
  isrlab topics reassign --bootstrap-server 127.0.0.1:9092 --verify --reassignment-json-file plan.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := 0
			for _, b := range []bool{execute, verify, generate, cancel, ls} {
				if b {
					n++
				}
			}
			if n != 1 {
				return usageError("exactly one of --generate, --execute, --verify, --cancel and --list is required")
			}
			out := cmd.OutOrStdout()
			adm, cl, err := af.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancelCtx := context.WithTimeout(cmd.Context(), af.timeout)
			defer cancelCtx()
			return func() error {
				switch {
				case generate:
					if topicsFile == "" || brokerList == "" {
						return usageError("--generate needs --topics-to-move-json-file and --broker-list")
					}
					brokers, err := parseBrokerList(brokerList)
					if err != nil {
						return err
					}
					if seed == 0 {
						seed = time.Now().UnixNano()
					}
					return generateReassignment(ctx, out, adm, topicsFile, brokers, rand.New(rand.NewSource(seed)))
				case ls:
					return listReassignments(ctx, out, cl)
				}
				if file == "" {
					return usageError("--reassignment-json-file is required")
				}
				plan, err := readReassignment(file)
				if err != nil {
					return err
				}
				switch {
				case execute:
					return executeReassignment(ctx, out, adm, cl, plan, additional)
				case verify:
					return verifyReassignment(ctx, out, adm, cl, plan)
				default:
					return cancelReassignment(ctx, out, adm, plan)
				}
			}()
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "reassignment-json-file", "", "the reassignment plan (JSON)")
	f.StringVar(&topicsFile, "topics-to-move-json-file", "", "the topics to move, for --generate (JSON)")
	f.StringVar(&brokerList, "broker-list", "", "comma-separated broker ids to move to, for --generate")
	f.BoolVar(&generate, "generate", false, "propose an assignment of the topics over --broker-list")
	f.BoolVar(&execute, "execute", false, "start the reassignment in --reassignment-json-file")
	f.BoolVar(&verify, "verify", false, "check whether the reassignment in --reassignment-json-file completed")
	f.BoolVar(&cancel, "cancel", false, "cancel the reassignments of --reassignment-json-file's partitions")
	f.BoolVar(&ls, "list", false, "list the reassignments in progress")
	f.BoolVar(&additional, "additional", false, "with --execute: start even while other reassignments are in progress")
	f.Int64Var(&seed, "seed", 0, "with --generate: the placement's random seed (0: from the clock)")
	return cmd
}

func parseBrokerList(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, usageError("--broker-list %q: %v", s, err)
		}
		out = append(out, int32(n))
	}
	return out, nil
}

func readReassignment(path string) (reassignmentJSON, error) {
	var plan reassignmentJSON
	b, err := os.ReadFile(path)
	if err != nil {
		return plan, usageError("--reassignment-json-file: %v", err)
	}
	if err := json.Unmarshal(b, &plan); err != nil {
		return plan, usageError("--reassignment-json-file %s: %v", path, err)
	}
	if len(plan.Partitions) == 0 {
		return plan, usageError("--reassignment-json-file %s: no partitions", path)
	}
	seen := map[string]bool{}
	for _, p := range plan.Partitions {
		key := fmt.Sprintf("%s-%d", p.Topic, p.Partition)
		if seen[key] {
			return plan, usageError("--reassignment-json-file %s: partition %s given twice", path, key)
		}
		seen[key] = true
		for _, d := range p.LogDirs {
			if d != "any" {
				return plan, usageError("--reassignment-json-file %s: %s: log_dirs other than \"any\" are not supported", path, key)
			}
		}
	}
	return plan, nil
}

// currentAssignment reads the replicas of every partition of topics.
func currentAssignment(ctx context.Context, adm *kadm.Client, topics []string) (reassignmentJSON, error) {
	tds, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return reassignmentJSON{}, fmt.Errorf("describe topics: %w", err)
	}
	cur := reassignmentJSON{Version: 1}
	for _, name := range topics {
		td, ok := tds[name]
		if !ok || td.Err != nil {
			e := error(kerr.UnknownTopicOrPartition)
			if ok {
				e = td.Err
			}
			return cur, fmt.Errorf("topic %s: %w", name, e)
		}
		for _, p := range td.Partitions.Sorted() {
			cur.Partitions = append(cur.Partitions, reassignPartitionJSON{Topic: name, Partition: p.Partition, Replicas: p.Replicas, LogDirs: anyDirs(len(p.Replicas))})
		}
	}
	return cur, nil
}

func anyDirs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "any"
	}
	return out
}

func planTopics(plan reassignmentJSON) []string {
	var out []string
	for _, p := range plan.Partitions {
		if !slices.Contains(out, p.Topic) {
			out = append(out, p.Topic)
		}
	}
	return out
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "%s\n", b)
}

// generateReassignment is --generate: Kafka's rack-unaware placement of
// each topic's partitions over the given brokers, keeping its replication
// factor.
func generateReassignment(ctx context.Context, w io.Writer, adm *kadm.Client, topicsFile string, brokers []int32, rng *rand.Rand) error {
	b, err := os.ReadFile(topicsFile)
	if err != nil {
		return usageError("--topics-to-move-json-file: %v", err)
	}
	var tm topicsToMoveJSON
	if err := json.Unmarshal(b, &tm); err != nil || len(tm.Topics) == 0 {
		return usageError("--topics-to-move-json-file %s: want {\"topics\":[{\"topic\":\"t\"}],\"version\":1}", topicsFile)
	}
	var topics []string
	for _, t := range tm.Topics {
		topics = append(topics, t.Topic)
	}
	cur, err := currentAssignment(ctx, adm, topics)
	if err != nil {
		return err
	}
	proposed := reassignmentJSON{Version: 1}
	for _, name := range topics {
		var n int32
		rf := 0
		for _, p := range cur.Partitions {
			if p.Topic == name {
				n++
				rf = len(p.Replicas)
			}
		}
		assign, err := controller.AssignReplicas(brokers, n, int16(rf), rng)
		if err != nil {
			return fmt.Errorf("topic %s: %w", name, err)
		}
		for p := int32(0); p < n; p++ {
			proposed.Partitions = append(proposed.Partitions, reassignPartitionJSON{Topic: name, Partition: p, Replicas: assign[p], LogDirs: anyDirs(rf)})
		}
	}
	fmt.Fprintln(w, "Current partition replica assignment")
	writeJSON(w, cur)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Proposed partition reassignment configuration")
	writeJSON(w, proposed)
	return nil
}

// ongoing lists every reassignment in progress (null topics, which kadm
// does not send).
func ongoing(ctx context.Context, cl *kgo.Client) (*kmsg.ListPartitionReassignmentsResponse, error) {
	resp, err := kmsg.NewPtrListPartitionReassignmentsRequest().RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("list partition reassignments: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("list partition reassignments: %w", err)
	}
	return resp, nil
}

// executeReassignment is --execute.
func executeReassignment(ctx context.Context, w io.Writer, adm *kadm.Client, cl *kgo.Client, plan reassignmentJSON, additional bool) error {
	if !additional {
		on, err := ongoing(ctx, cl)
		if err != nil {
			return err
		}
		if len(on.Topics) > 0 {
			return withCode(1, fmt.Errorf("cannot execute because there is an existing partition assignment; use --additional to start another anyway"))
		}
	}
	cur, err := currentAssignment(ctx, adm, planTopics(plan))
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "Current partition replica assignment")
	fmt.Fprintln(w)
	writeJSON(w, cur)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Save this to use as the --reassignment-json-file option during rollback")
	var req kadm.AlterPartitionAssignmentsReq
	for _, p := range plan.Partitions {
		req.Assign(p.Topic, p.Partition, p.Replicas)
	}
	res, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		return fmt.Errorf("alter partition reassignments: %w", err)
	}
	var ok, failed []string
	for _, r := range res.Sorted() {
		name := fmt.Sprintf("%s-%d", r.Topic, r.Partition)
		if r.Err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v %s", name, r.Err, r.ErrMessage))
		} else {
			ok = append(ok, name)
		}
	}
	if len(ok) > 0 {
		fmt.Fprintf(w, "Successfully started partition reassignments for %s\n", strings.Join(ok, ","))
	}
	if len(failed) > 0 {
		return withCode(1, fmt.Errorf("error reassigning partition(s):\n%s", strings.Join(failed, "\n")))
	}
	return nil
}

// verifyReassignment is --verify: a partition is complete when no
// reassignment is in progress and its replicas are the planned ones.
func verifyReassignment(ctx context.Context, w io.Writer, adm *kadm.Client, cl *kgo.Client, plan reassignmentJSON) error {
	on, err := ongoing(ctx, cl)
	if err != nil {
		return err
	}
	moving := map[string]bool{}
	for _, t := range on.Topics {
		for _, p := range t.Partitions {
			moving[fmt.Sprintf("%s-%d", t.Topic, p.Partition)] = true
		}
	}
	cur, err := currentAssignment(ctx, adm, planTopics(plan))
	if err != nil {
		return err
	}
	now := map[string][]int32{}
	for _, p := range cur.Partitions {
		now[fmt.Sprintf("%s-%d", p.Topic, p.Partition)] = p.Replicas
	}
	fmt.Fprintln(w, "Status of partition reassignment:")
	incomplete := 0
	for _, p := range plan.Partitions {
		name := fmt.Sprintf("%s-%d", p.Topic, p.Partition)
		switch {
		case moving[name]:
			incomplete++
			fmt.Fprintf(w, "Reassignment of partition %s is still in progress.\n", name)
		case slices.Equal(now[name], p.Replicas):
			fmt.Fprintf(w, "Reassignment of partition %s is completed.\n", name)
		default:
			incomplete++
			fmt.Fprintf(w, "There is no active reassignment of partition %s, but replica set is %s rather than %s.\n", name, joinIDs(now[name]), joinIDs(p.Replicas))
		}
	}
	if incomplete > 0 {
		return withCode(1, fmt.Errorf("%d of %d partitions not reassigned yet", incomplete, len(plan.Partitions)))
	}
	return nil
}

// cancelReassignment is --cancel.
func cancelReassignment(ctx context.Context, w io.Writer, adm *kadm.Client, plan reassignmentJSON) error {
	var req kadm.AlterPartitionAssignmentsReq
	for _, p := range plan.Partitions {
		req.CancelAssign(p.Topic, p.Partition)
	}
	res, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		return fmt.Errorf("cancel partition reassignments: %w", err)
	}
	var done []string
	for _, r := range res.Sorted() {
		name := fmt.Sprintf("%s-%d", r.Topic, r.Partition)
		if r.Err != nil && r.Err != kerr.NoReassignmentInProgress {
			return withCode(1, fmt.Errorf("cancel %s: %v %s", name, r.Err, r.ErrMessage))
		}
		if r.Err == nil {
			done = append(done, name)
		}
	}
	fmt.Fprintf(w, "Successfully cancelled partition reassignments for: %s\n", strings.Join(done, ","))
	return nil
}

// listReassignments is --list.
func listReassignments(ctx context.Context, w io.Writer, cl *kgo.Client) error {
	on, err := ongoing(ctx, cl)
	if err != nil {
		return err
	}
	if len(on.Topics) == 0 {
		fmt.Fprintln(w, "No partition reassignments found.")
		return nil
	}
	fmt.Fprintln(w, "Current partition reassignments:")
	for _, t := range on.Topics {
		for _, p := range t.Partitions {
			fmt.Fprintf(w, "%s-%d: replicas: %s. adding: %s. removing: %s.\n", t.Topic, p.Partition, joinIDs(p.Replicas), joinIDs(p.AddingReplicas), joinIDs(p.RemovingReplicas))
		}
	}
	return nil
}
