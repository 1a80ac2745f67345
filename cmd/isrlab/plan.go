package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/ssh"
	"github.com/isrlab/isrlab/lab"
	"github.com/isrlab/isrlab/nemesis"
)

// writePlan prints what `isrlab run` will do with sc as run runID: the
// cluster it brings up or the hosts it touches, the topic, the workload
// and every fault event, without touching anything.
func writePlan(w io.Writer, sc lab.Scenario, runID, results string) error {
	seed := "picked at the start and recorded"
	if sc.Seed != 0 {
		seed = fmt.Sprint(sc.Seed)
	}
	backend := orDefault(sc.Cluster.Backend, compose.Netns)
	fmt.Fprintf(w, "plan: isrlab run %s as run %s (seed %s), %s backend\n", sc.Name, runID, seed, backend)
	switch backend {
	case ssh.Name:
		topo, err := sc.Cluster.SSH.Topology("lab-"+runID, runID, filepath.Join(results, sc.Name, "<start>-"+runID, "nodes"))
		if err != nil {
			return err
		}
		if err := sc.Cluster.SSH.Plan(w, topo); err != nil {
			return err
		}
		if len(sc.Cluster.Config) > 0 {
			fmt.Fprintf(w, "  cluster.config (%s) is NOT applied: the hosts run their own broker configuration\n",
				strings.Join(slices.Sorted(maps.Keys(sc.Cluster.Config)), ", "))
		}
	case compose.Docker:
		fmt.Fprintf(w, "  creates Docker network and containers labelled with run %s: %d coordinators, %d brokers, 1 client host; removes them at the end\n",
			runID, sc.Cluster.Coordinators, sc.Cluster.Brokers)
	default:
		fmt.Fprintf(w, "  creates network namespaces and a bridge named after run %s: %d coordinators, %d brokers of this isrlab binary, 1 client host; removes them at the end\n",
			runID, sc.Cluster.Coordinators, sc.Cluster.Brokers)
	}
	fmt.Fprintf(w, "\n  topic %s: created if absent (%d partitions, replication factor %d", sc.Topic.Name, sc.Topic.Partitions, sc.Topic.ReplicationFactor)
	if len(sc.Topic.Config) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(sc.Topic.Config)) {
			kv = append(kv, k+"="+sc.Topic.Config[k])
		}
		fmt.Fprintf(w, ", %s", strings.Join(kv, " "))
	}
	fmt.Fprintln(w, "); it is not deleted afterwards")
	wl := orDefault(sc.Workload.Type, "log")
	fmt.Fprintf(w, "  workload %s for %v: %d producers (acks=%s), %d consumers\n", wl, sc.Duration,
		sc.Workload.Producers, orDefault(sc.Workload.Acks, "all"), sc.Workload.Consumers)
	events, err := sc.ScheduleEvents()
	if err != nil {
		return err
	}
	if len(events) == 0 {
		fmt.Fprintln(w, "  faults: none")
	} else {
		fmt.Fprintln(w, "  faults (targets resolved when each fires):")
	}
	for _, e := range events {
		switch e.Action {
		case nemesis.ActStart:
			b, _ := json.Marshal(e.Fault)
			fmt.Fprintf(w, "    %8v  start #%d %s\n", e.At, e.Key, b)
		case nemesis.ActStop:
			fmt.Fprintf(w, "    %8v  heal #%d\n", e.At, e.Key)
		default:
			fmt.Fprintf(w, "    %8v  heal everything\n", e.At)
		}
	}
	fmt.Fprintf(w, "  results under %s/%s/\n", results, sc.Name)
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
