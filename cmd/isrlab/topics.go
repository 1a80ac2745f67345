package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/kafkaconfig"
)

func init() { rootCmd.AddCommand(newTopicsCmd()) }

// adminFlags are the connection flags shared by the admin commands.
type adminFlags struct {
	bootstrap     string
	timeout       time.Duration
	commandConfig string
}

func (f *adminFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.bootstrap, "bootstrap-server", "", "comma-separated HOST:PORT list of brokers (required)")
	cmd.PersistentFlags().DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the cluster")
	cmd.PersistentFlags().StringVar(&f.commandConfig, "command-config", "", "client properties file with security.protocol, sasl.mechanism, sasl.username, sasl.password.file, ssl.ca.location, ... (docs/security.md)")
}

// security reads --command-config; the zero config is PLAINTEXT.
func (f *adminFlags) security() (kafkaconfig.ClientSecurity, error) {
	if f.commandConfig == "" {
		return kafkaconfig.ClientSecurity{}, nil
	}
	s, err := kafkaconfig.LoadClientSecurity(f.commandConfig)
	if err != nil {
		return s, usageError("--command-config: %v", err)
	}
	return s, nil
}

func (f *adminFlags) client() (*kadm.Client, *kgo.Client, error) {
	if f.bootstrap == "" {
		return nil, nil, usageError("--bootstrap-server is required")
	}
	sec, err := f.security()
	if err != nil {
		return nil, nil, err
	}
	opts, err := sec.KgoOpts(nil)
	if err != nil {
		return nil, nil, usageError("--command-config: %v", err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(f.bootstrap, ",")...)}, opts...)...)
	if err != nil {
		return nil, nil, usageError("--bootstrap-server %q: %v", f.bootstrap, err)
	}
	return kadm.NewClient(cl), cl, nil
}

// do connects to the cluster, runs fn with a context bounded by --timeout,
// and closes the connection.
func (f *adminFlags) do(ctx context.Context, fn func(ctx context.Context, adm *kadm.Client) error) error {
	adm, cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	return fn(ctx, adm)
}

func parseConfigs(list []string) (map[string]*string, error) {
	out := map[string]*string{}
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("--config %q: expected key=value", kv)
		}
		out[k] = &v
	}
	return out, nil
}

func newTopicsCmd() *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "Create, describe, delete and configure topics (like kafka-topics.sh)",
		Long: `Manage topics on any Kafka-compatible cluster, shaped like Kafka's
kafka-topics.sh and kafka-configs.sh.`,
		Example: `  isrlab topics create --bootstrap-server 127.0.0.1:9092 --topic t --partitions 4 --replication-factor 3 --config min.insync.replicas=2
  isrlab topics describe --bootstrap-server 127.0.0.1:9092 --topic t
  isrlab topics delete --bootstrap-server 127.0.0.1:9092 --topic t`,
	}
	af.register(cmd)

	var (
		topic      string
		partitions int32
		rf         int16
		configs    []string
		asJSON     bool
	)
	create := &cobra.Command{
		Use:   "create --topic T [--partitions N] [--replication-factor R] [--config key=value]...",
		Short: "Create a topic",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" {
				return usageError("--topic is required")
			}
			cfgs, err := parseConfigs(configs)
			if err != nil {
				return err
			}
			return af.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				resp, err := adm.CreateTopic(ctx, partitions, rf, cfgs, topic)
				if err == nil {
					err = resp.Err
				}
				if err != nil {
					msg := ""
					if resp.ErrMessage != "" {
						msg = ": " + resp.ErrMessage
					}
					return fmt.Errorf("create topic %s: %w%s", topic, err, msg)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Created topic %s.\n", topic)
				return nil
			})
		},
	}
	create.Flags().StringVar(&topic, "topic", "", "topic name")
	create.Flags().Int32Var(&partitions, "partitions", -1, "partition count (-1: the broker's num.partitions)")
	create.Flags().Int16Var(&rf, "replication-factor", -1, "replication factor (-1: the broker's default.replication.factor)")
	create.Flags().StringArrayVar(&configs, "config", nil, "topic config key=value; repeatable")

	describe := &cobra.Command{
		Use:   "describe [--topic T] [--json]",
		Short: "Describe topics: leader, replicas and ISR per partition",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return af.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				var names []string
				if topic != "" {
					names = []string{topic}
				}
				tds, err := adm.ListTopics(ctx, names...)
				if err != nil {
					return fmt.Errorf("describe topics: %w", err)
				}
				if topic != "" {
					if td, ok := tds[topic]; !ok || td.Err != nil {
						e := errors.New("unknown topic")
						if ok {
							e = td.Err
						}
						return fmt.Errorf("topic %s: %w", topic, e)
					}
				}
				return printTopics(cmd.OutOrStdout(), tds, asJSON)
			})
		},
	}
	describe.Flags().StringVar(&topic, "topic", "", "topic to describe (default: all)")
	describe.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	del := &cobra.Command{
		Use:   "delete --topic T",
		Short: "Delete a topic and its data",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" {
				return usageError("--topic is required")
			}
			return af.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				resp, err := adm.DeleteTopic(ctx, topic)
				if err == nil {
					err = resp.Err
				}
				if err != nil {
					return fmt.Errorf("delete topic %s: %w", topic, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Deleted topic %s.\n", topic)
				return nil
			})
		},
	}
	del.Flags().StringVar(&topic, "topic", "", "topic name")

	alter := &cobra.Command{
		Use:   "alter-config --topic T --config key=value...",
		Short: "Set topic-level configs (an empty value deletes the override)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" || len(configs) == 0 {
				return usageError("--topic and at least one --config are required")
			}
			cfgs, err := parseConfigs(configs)
			if err != nil {
				return err
			}
			return af.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				var alters []kadm.AlterConfig
				for k, v := range cfgs {
					if *v == "" {
						alters = append(alters, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
					} else {
						alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: v})
					}
				}
				resps, err := adm.AlterTopicConfigs(ctx, alters, topic)
				if err != nil {
					return fmt.Errorf("alter configs of %s: %w", topic, err)
				}
				for _, r := range resps {
					if r.Err != nil {
						return fmt.Errorf("alter configs of %s: %w %s", topic, r.Err, r.ErrMessage)
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Updated config of topic %s.\n", topic)
				return nil
			})
		},
	}
	alter.Flags().StringVar(&topic, "topic", "", "topic name")
	alter.Flags().StringArrayVar(&configs, "config", nil, "topic config key=value; repeatable")

	cmd.AddCommand(create, describe, del, alter, newReassignCmd(&af))
	return cmd
}

// topicJSON is the --json form of one topic.
type topicJSON struct {
	Topic      string          `json:"topic"`
	Partitions []partitionJSON `json:"partitions"`
}

type partitionJSON struct {
	Partition   int32   `json:"partition"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	Error       string  `json:"error,omitempty"`
}

func printTopics(w io.Writer, tds kadm.TopicDetails, asJSON bool) error {
	names := tds.Names()
	sort.Strings(names)
	var out []topicJSON
	for _, n := range names {
		td := tds[n]
		tj := topicJSON{Topic: n}
		for _, p := range td.Partitions.Sorted() {
			pj := partitionJSON{Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, Replicas: p.Replicas, ISR: p.ISR}
			if p.Err != nil {
				pj.Error = p.Err.Error()
			}
			tj.Partitions = append(tj.Partitions, pj)
		}
		out = append(out, tj)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for _, tj := range out {
		rf := 0
		if len(tj.Partitions) > 0 {
			rf = len(tj.Partitions[0].Replicas)
		}
		fmt.Fprintf(w, "Topic: %s\tPartitionCount: %d\tReplicationFactor: %d\n", tj.Topic, len(tj.Partitions), rf)
		for _, p := range tj.Partitions {
			fmt.Fprintf(w, "\tTopic: %s\tPartition: %d\tLeader: %s\tReplicas: %s\tIsr: %s\n", tj.Topic, p.Partition, leaderString(p.Leader), joinIDs(p.Replicas), joinIDs(p.ISR))
		}
	}
	return nil
}

func leaderString(l int32) string {
	if l < 0 {
		return "none"
	}
	return fmt.Sprint(l)
}

func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}
