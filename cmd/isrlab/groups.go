package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func init() { rootCmd.AddCommand(newGroupsCmd()) }

func newGroupsCmd() *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "List, describe and delete consumer groups (like kafka-consumer-groups.sh)",
		Long: `Manage consumer groups on any Kafka-compatible cluster, shaped like Kafka's
kafka-consumer-groups.sh. "describe" shows the group's state and members,
and per partition the committed offset, the log end offset, the lag and
the member that owns it.`,
		Example: `  isrlab groups list --bootstrap-server 127.0.0.1:9092
  isrlab groups describe --bootstrap-server 127.0.0.1:9092 --group my-group
  isrlab groups delete --bootstrap-server 127.0.0.1:9092 --group my-group`,
	}
	af.register(cmd)

	var (
		groups []string
		states []string
		asJSON bool
	)
	list := &cobra.Command{
		Use:   "list [--state S]... [--json]",
		Short: "List the consumer groups of every broker",
		Long: `List every consumer group the cluster's coordinators know, with its state,
protocol type and coordinator broker (kafka-consumer-groups.sh --list --state).`,
		Example: `  isrlab groups list --bootstrap-server 127.0.0.1:9092
  isrlab groups list --bootstrap-server 127.0.0.1:9092 --state Stable --state Empty --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return af.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				listed, err := adm.ListGroups(ctx, states...)
				if err != nil {
					return fmt.Errorf("list groups: %w", err)
				}
				return printGroupList(cmd.OutOrStdout(), listed, asJSON)
			})
		},
	}
	list.Flags().StringArrayVar(&states, "state", nil, "only groups in this state (Empty, Stable, PreparingRebalance, CompletingRebalance); repeatable")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	describe := &cobra.Command{
		Use:   "describe [--group G]... [--json]",
		Short: "Describe groups: state, members, assignments, committed offsets and lag",
		Long: `Describe consumer groups as kafka-consumer-groups.sh --describe does: per
partition the committed offset (CURRENT-OFFSET, "-" when none), the log end
offset, the lag and the member that owns the partition; then every member
with its assigned partitions. Without --group, every group is described.`,
		Example: `  isrlab groups describe --bootstrap-server 127.0.0.1:9092 --group my-group
  isrlab groups describe --bootstrap-server 127.0.0.1:9092 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return af.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				names := groups
				if len(names) == 0 {
					listed, err := adm.ListGroups(ctx)
					if err != nil {
						return fmt.Errorf("list groups: %w", err)
					}
					names = listed.Groups()
				}
				if len(names) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "No consumer groups.")
					return nil
				}
				lags, err := adm.Lag(ctx, names...)
				if err != nil {
					return fmt.Errorf("describe groups: %w", err)
				}
				return printGroupLags(cmd.OutOrStdout(), names, lags, asJSON)
			})
		},
	}
	describe.Flags().StringArrayVar(&groups, "group", nil, "group to describe (default: all); repeatable")
	describe.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	del := &cobra.Command{
		Use:   "delete --group G...",
		Short: "Delete empty groups and their committed offsets",
		Long: `Delete consumer groups that have no members, with their committed offsets.
A group with members is refused (NON_EMPTY_GROUP) and the command fails.`,
		Example: `  isrlab groups delete --bootstrap-server 127.0.0.1:9092 --group my-group --group other`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(groups) == 0 {
				return usageError("--group is required")
			}
			return af.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				resps, err := adm.DeleteGroups(ctx, groups...)
				if err != nil {
					return fmt.Errorf("delete groups: %w", err)
				}
				var failed []string
				for _, g := range groups {
					r, ok := resps[g]
					switch {
					case !ok:
						failed = append(failed, g+": no answer")
					case r.Err != nil:
						failed = append(failed, fmt.Sprintf("%s: %v", g, r.Err))
					default:
						fmt.Fprintf(cmd.OutOrStdout(), "Deleted consumer group '%s'.\n", g)
					}
				}
				if len(failed) > 0 {
					return fmt.Errorf("delete groups: %s", strings.Join(failed, "; "))
				}
				return nil
			})
		},
	}
	del.Flags().StringArrayVar(&groups, "group", nil, "group to delete; repeatable")

	cmd.AddCommand(list, describe, del)
	return cmd
}

type groupListJSON struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	Coordinator  int32  `json:"coordinator"`
}

func printGroupList(w io.Writer, listed kadm.ListedGroups, asJSON bool) error {
	out := []groupListJSON{}
	for _, g := range listed.Sorted() {
		out = append(out, groupListJSON{Group: g.Group, State: g.State, ProtocolType: g.ProtocolType, Coordinator: g.Coordinator})
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tPROTOCOL-TYPE\tCOORDINATOR")
	for _, g := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", g.Group, g.State, dash(g.ProtocolType), g.Coordinator)
	}
	return tw.Flush()
}

// groupJSON is the --json form of a described group.
type groupJSON struct {
	Group        string       `json:"group"`
	State        string       `json:"state"`
	Coordinator  int32        `json:"coordinator"`
	ProtocolType string       `json:"protocol_type"`
	Protocol     string       `json:"protocol"`
	Members      []memberJSON `json:"members"`
	Offsets      []offsetJSON `json:"offsets"`
	TotalLag     int64        `json:"total_lag"`
	Error        string       `json:"error,omitempty"`
}

type memberJSON struct {
	MemberID   string             `json:"member_id"`
	ClientID   string             `json:"client_id"`
	Host       string             `json:"host"`
	Assignment map[string][]int32 `json:"assignment"`
}

type offsetJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"` // -1: none
	LogEnd    int64  `json:"log_end"`
	Lag       int64  `json:"lag"` // -1: unknown
	MemberID  string `json:"member_id,omitempty"`
	ClientID  string `json:"client_id,omitempty"`
	Host      string `json:"host,omitempty"`
	Error     string `json:"error,omitempty"`
}

func describeGroup(name string, l kadm.DescribedGroupLag) groupJSON {
	g := groupJSON{Group: name, State: l.State, Coordinator: l.Coordinator.NodeID, ProtocolType: l.ProtocolType, Protocol: l.Protocol, Members: []memberJSON{}, Offsets: []offsetJSON{}}
	if err := l.Error(); err != nil {
		g.Error = err.Error()
	}
	for _, m := range l.Members {
		mj := memberJSON{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Assignment: map[string][]int32{}}
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range ca.Topics {
				ps := append([]int32(nil), t.Partitions...)
				sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
				mj.Assignment[t.Topic] = ps
			}
		}
		g.Members = append(g.Members, mj)
	}
	for _, ml := range l.Lag.Sorted() {
		o := offsetJSON{Topic: ml.Topic, Partition: ml.Partition, Committed: ml.Commit.At, LogEnd: ml.End.Offset, Lag: ml.Lag}
		if ml.Member != nil {
			o.MemberID, o.ClientID, o.Host = ml.Member.MemberID, ml.Member.ClientID, ml.Member.ClientHost
		}
		if ml.Err != nil {
			o.Error = ml.Err.Error()
		}
		if o.Lag > 0 {
			g.TotalLag += o.Lag
		}
		g.Offsets = append(g.Offsets, o)
	}
	return g
}

func printGroupLags(w io.Writer, names []string, lags kadm.DescribedGroupLags, asJSON bool) error {
	var out []groupJSON
	for _, n := range names {
		l, ok := lags[n]
		if !ok {
			out = append(out, groupJSON{Group: n, State: "Dead", Members: []memberJSON{}, Offsets: []offsetJSON{}, Error: "no answer"})
			continue
		}
		out = append(out, describeGroup(n, l))
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for i, g := range out {
		if i > 0 {
			fmt.Fprintln(w)
		}
		switch {
		case g.Error != "":
			fmt.Fprintf(w, "Consumer group '%s': %s\n", g.Group, g.Error)
			continue
		case g.State == "Dead" && len(g.Offsets) == 0:
			fmt.Fprintf(w, "Consumer group '%s' does not exist.\n", g.Group)
			continue
		}
		fmt.Fprintf(w, "Consumer group '%s': state %s, protocol %s/%s, coordinator %d, %d members, total lag %d\n",
			g.Group, g.State, dash(g.ProtocolType), dash(g.Protocol), g.Coordinator, len(g.Members), g.TotalLag)
		if len(g.Members) == 0 {
			fmt.Fprintf(w, "Consumer group '%s' has no active members.\n", g.Group)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nGROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tHOST\tCLIENT-ID")
		for _, o := range g.Offsets {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Group, o.Topic, o.Partition,
				offsetOrDash(o.Committed), offsetOrDash(o.LogEnd), offsetOrDash(o.Lag), dash(o.MemberID), dash(o.Host), dash(o.ClientID))
		}
		if len(g.Members) > 0 {
			fmt.Fprintln(tw, "\nCONSUMER-ID\tHOST\tCLIENT-ID\t#PARTITIONS\tASSIGNMENT")
			for _, m := range g.Members {
				n, parts := 0, []string{}
				topics := make([]string, 0, len(m.Assignment))
				for t := range m.Assignment {
					topics = append(topics, t)
				}
				sort.Strings(topics)
				for _, t := range topics {
					ps := make([]string, len(m.Assignment[t]))
					for i, p := range m.Assignment[t] {
						ps[i] = fmt.Sprint(p)
					}
					n += len(ps)
					parts = append(parts, t+"("+strings.Join(ps, ",")+")")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", m.MemberID, m.Host, m.ClientID, n, dash(strings.Join(parts, " ")))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func offsetOrDash(v int64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprint(v)
}
