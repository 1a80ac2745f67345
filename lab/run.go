package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/backends"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// Options configure a run.
type Options struct {
	ResultsDir string // default "results"
	Binary     string // the isrlab binary the nodes run; default this one
	Out        io.Writer
	Log        *slog.Logger
}

// Result is what a run produced.
type Result struct {
	Dir     string
	Verdict *checker.Verdict
}

// Run runs sc once and checks its history. The run directory holds the
// resolved scenario (with its seed), history.jsonl, verdict.json and the
// nodes' logs; results/latest points at it.
func Run(ctx context.Context, sc Scenario, o Options) (Result, error) {
	if err := sc.Validate(); err != nil {
		return Result{}, err
	}
	if o.ResultsDir == "" {
		o.ResultsDir = "results"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return Result{}, err
		}
		o.Binary = exe
	}
	if sc.Seed == 0 {
		sc.Seed = time.Now().UnixNano()%1_000_000_000 + 1
	}
	sc.Workload.Seed = sc.Seed
	start := time.Now()
	dir, err := filepath.Abs(filepath.Join(o.ResultsDir, sc.Name, start.UTC().Format("20060102T150405Z")))
	if err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, err
	}
	res := Result{Dir: dir}
	if data, err := yaml.Marshal(sc); err == nil {
		os.WriteFile(filepath.Join(dir, "scenario.yaml"), data, 0o644)
	}
	linkLatest(o.ResultsDir, dir)

	var kv []compose.KV
	for k, v := range sc.Cluster.Config {
		kv = append(kv, compose.KV{Key: k, Value: v})
	}
	slices.SortFunc(kv, func(a, b compose.KV) int { return strings.Compare(a.Key, b.Key) })
	topo, err := compose.Build(compose.Options{
		Name: "lab", RunID: fmt.Sprintf("%08x", uint32(sc.Seed)), Coordinators: sc.Cluster.Coordinators, Brokers: sc.Cluster.Brokers,
		Clients: 1, BrokerConfig: kv, Binary: o.Binary, RunDir: filepath.Join(dir, "nodes"),
	})
	if err != nil {
		return res, err
	}
	backend, err := backends.New(sc.Cluster.Backend, backends.Options{KeepData: true, Log: o.Log})
	if err != nil {
		return res, err
	}
	histPath := filepath.Join(dir, "history.jsonl")
	fmt.Fprintf(o.Out, "isrlab run %s (seed %d): %d coordinators, %d brokers, %s backend\n  results: %s\n",
		sc.Name, sc.Seed, sc.Cluster.Coordinators, sc.Cluster.Brokers, orDefault(sc.Cluster.Backend, "netns"), dir)
	err = compose.Run(ctx, backend, topo, func(ctx context.Context, c *compose.Cluster) error {
		fmt.Fprintf(o.Out, "  cluster up in %.1fs; bootstrap %s\n", time.Since(start).Seconds(), strings.Join(c.Bootstrap(), ","))
		return drive(ctx, sc, c, histPath, o)
	})
	// The coordinators' etcd data (preallocated WAL) is of no use after
	// the run; their logs stay.
	for _, n := range topo.Role(compose.RoleCoordinator) {
		os.RemoveAll(filepath.Join(n.DataDir, "member"))
	}
	if err != nil {
		return res, err
	}
	v, err := checker.Check(func() (io.ReadCloser, error) { return os.Open(histPath) }, histPath, checker.Options{})
	if err != nil {
		return res, fmt.Errorf("check %s: %w", histPath, err)
	}
	res.Verdict = v
	if data, err := json.MarshalIndent(v, "", "  "); err == nil {
		os.WriteFile(filepath.Join(dir, "verdict.json"), append(data, '\n'), 0o644)
	}
	printVerdict(o.Out, v)
	return res, nil
}

// drive runs the workload, the faults and the state observer against c.
func drive(ctx context.Context, sc Scenario, c *compose.Cluster, histPath string, o Options) error {
	dial := kgo.Dialer(c.Dial())
	seeds := c.Bootstrap()
	adm, closeAdm, err := admin(seeds, dial)
	if err != nil {
		return err
	}
	defer closeAdm()
	if err := createTopic(ctx, adm, sc.Topic); err != nil {
		return err
	}
	f, err := os.Create(histPath)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := history.NewWriter(f, history.Header{Run: c.RunID, Seed: sc.Seed, Topic: sc.Topic.Name, Partitions: int(sc.Topic.Partitions), Start: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	t0 := time.Now()
	rec := history.NewRecorder(w, func() time.Duration { return time.Since(t0) })
	defer rec.Flush()

	wl, err := workloads.NewLog(sc.Workload, rec, seeds, dial)
	if err != nil {
		return err
	}
	wctx, stopWorkload := context.WithCancel(ctx)
	defer stopWorkload()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := wl.Run(wctx); err != nil && wctx.Err() == nil {
			o.Log.Warn("workload", "err", err)
		}
	}()
	octx, stopObserver := context.WithCancel(ctx)
	var owg sync.WaitGroup
	owg.Add(1)
	go func() {
		defer owg.Done()
		observe(octx, adm, sc.Topic.Name, rec)
	}()
	var fwg sync.WaitGroup
	healAll := make(chan struct{})
	for _, ft := range sc.Faults {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			applyFault(ctx, c, adm, ft, rec, o.Out, t0, healAll)
		}()
	}
	fmt.Fprintf(o.Out, "  workload running for %v with %d fault(s)\n", sc.Duration, len(sc.Faults))
	select {
	case <-ctx.Done():
	case <-time.After(sc.Duration):
	}
	stopWorkload()
	wg.Wait()
	close(healAll)
	fwg.Wait()
	if ctx.Err() != nil {
		stopObserver()
		owg.Wait()
		return ctx.Err()
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := compose.Ready(rctx, c, nil); err != nil {
		o.Log.Warn("cluster not ready before the drain", "err", err)
	}
	fmt.Fprintf(o.Out, "  faults healed; draining every partition\n")
	if err := wl.Drain(rctx); err != nil {
		o.Log.Warn("drain", "err", err)
	}
	stopObserver()
	owg.Wait()
	return rec.Flush()
}

func admin(seeds []string, dial kgo.Opt) (*kadm.Client, func(), error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), dial)
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl.Close, nil
}

// createTopic creates the scenario's topic and waits for full ISRs.
func createTopic(ctx context.Context, adm *kadm.Client, t Topic) error {
	cfg := map[string]*string{}
	for k, v := range t.Config {
		cfg[k] = &v
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := adm.CreateTopic(cctx, t.Partitions, t.ReplicationFactor, cfg, t.Name)
		cancel()
		if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("create topic %s: %w", t.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		tds, err := adm.ListTopics(cctx, t.Name)
		cancel()
		if err == nil {
			ok := len(tds[t.Name].Partitions) == int(t.Partitions)
			for _, p := range tds[t.Name].Partitions {
				ok = ok && p.Leader >= 0 && len(p.ISR) == int(t.ReplicationFactor)
			}
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("topic %s not online with full ISRs: %v", t.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// observe records a cluster-state event whenever a partition's leader,
// epoch or ISR changes in the metadata.
func observe(ctx context.Context, adm *kadm.Client, topic string, rec *history.Recorder) {
	type key struct {
		leader, epoch int32
		isr           string
	}
	last := map[int32]key{}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		tds, err := adm.ListTopics(cctx, topic)
		cancel()
		if err == nil {
			for p, pd := range tds[topic].Partitions {
				isr := slices.Sorted(slices.Values(pd.ISR))
				k := key{pd.Leader, pd.LeaderEpoch, fmt.Sprint(isr)}
				if last[p] == k {
					continue
				}
				last[p] = k
				op := history.NewOp(history.Cluster, history.Info, history.FState)
				op.Partition, op.Leader, op.Epoch, op.ISR = p, pd.Leader, pd.LeaderEpoch, isr
				rec.Record(op)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// applyFault waits for the fault's time, resolves its target, applies it,
// and heals it HealAfter later (or when the run ends).
func applyFault(ctx context.Context, c *compose.Cluster, adm *kadm.Client, ft Fault, rec *history.Recorder, out io.Writer, t0 time.Time, healAll <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-healAll:
		return
	case <-time.After(time.Until(t0.Add(ft.At))):
	}
	name, err := resolveTarget(ctx, adm, c, ft.Target)
	f := "start-" + ft.Kind
	inv := history.NewOp(history.Nemesis, history.Invoke, f)
	targets, _ := json.Marshal([]string{name})
	inv.RawValue = targets
	rec.Record(inv)
	done := history.NewOp(history.Nemesis, history.Info, f)
	done.RawValue = targets
	node := c.Node(name)
	if err == nil && node == nil {
		err = fmt.Errorf("no node %s", name)
	}
	if err == nil {
		switch ft.Kind {
		case "kill":
			err = node.Kill()
		case "stop":
			err = node.Stop(ctx)
		case "pause":
			err = node.Pause()
		}
	}
	if err != nil {
		done.Error = err.Error()
		rec.Record(done)
		fmt.Fprintf(out, "  +%5.1fs %s %s failed: %v\n", time.Since(t0).Seconds(), ft.Kind, ft.Target, err)
		return
	}
	rec.Record(done)
	fmt.Fprintf(out, "  +%5.1fs %s %s (%s)\n", time.Since(t0).Seconds(), ft.Kind, name, ft.Target)
	if ft.HealAfter > 0 {
		select {
		case <-ctx.Done():
		case <-healAll:
		case <-time.After(ft.HealAfter):
		}
	} else {
		select {
		case <-ctx.Done():
		case <-healAll:
		}
	}
	stop := "stop-" + ft.Kind
	hinv := history.NewOp(history.Nemesis, history.Invoke, stop)
	hinv.RawValue = targets
	rec.Record(hinv)
	hctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if ft.Kind == "pause" {
		err = node.Resume()
	} else {
		err = node.Start(hctx)
	}
	hdone := history.NewOp(history.Nemesis, history.Info, stop)
	hdone.RawValue = targets
	if err != nil {
		hdone.Error = err.Error()
	}
	rec.Record(hdone)
	fmt.Fprintf(out, "  +%5.1fs healed %s %s\n", time.Since(t0).Seconds(), ft.Kind, name)
}

// resolveTarget turns leader:TOPIC/P, follower:TOPIC/P, controller or a
// node name into a node.
func resolveTarget(ctx context.Context, adm *kadm.Client, c *compose.Cluster, target string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch {
	case strings.HasPrefix(target, "leader:"), strings.HasPrefix(target, "follower:"):
		kind, rest, _ := strings.Cut(target, ":")
		t, ps, _ := strings.Cut(rest, "/")
		p, err := strconv.Atoi(ps)
		if err != nil {
			return "", fmt.Errorf("target %s: %w", target, err)
		}
		tds, err := adm.ListTopics(cctx, t)
		if err != nil {
			return "", err
		}
		pd, ok := tds[t].Partitions[int32(p)]
		if !ok || pd.Leader < 0 {
			return "", fmt.Errorf("target %s: no leader", target)
		}
		if kind == "leader" {
			return fmt.Sprintf("b%d", pd.Leader), nil
		}
		// The first replica in assignment order that is not the leader.
		for _, r := range pd.Replicas {
			if r != pd.Leader {
				return fmt.Sprintf("b%d", r), nil
			}
		}
		return "", fmt.Errorf("target %s: the partition has no follower", target)
	case target == "controller":
		m, err := adm.BrokerMetadata(cctx)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("b%d", m.Controller), nil
	}
	if c.Node(target) == nil {
		return "", fmt.Errorf("no node %s", target)
	}
	return target, nil
}

func printVerdict(out io.Writer, v *checker.Verdict) {
	fmt.Fprintf(out, "  verdict: valid=%v", v.Valid)
	if len(v.Anomalies) > 0 {
		fmt.Fprintf(out, " anomalies=%v", v.Anomalies)
	}
	frac := func(a checker.Ratio) string {
		if a.Total == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.3f", a.Fraction)
	}
	fmt.Fprintf(out, "\n  availability: %s overall, %s during faults, %s after healing\n",
		frac(v.Availability.Overall), frac(v.Availability.DuringFaults), frac(v.Availability.AfterHeal))
}

// linkLatest points results/latest at dir.
func linkLatest(results, dir string) {
	results, err := filepath.Abs(results)
	if err != nil {
		return
	}
	link := filepath.Join(results, "latest")
	os.Remove(link)
	if rel, err := filepath.Rel(results, dir); err == nil {
		os.Symlink(rel, link)
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
