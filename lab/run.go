package lab

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"math/rand"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/clusterapi"
	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/backends"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/results"
	"github.com/isrlab/isrlab/series"
	"github.com/isrlab/isrlab/workloads"
	"github.com/isrlab/isrlab/workloads/clients"
)

// Options configure a run.
type Options struct {
	ResultsDir string // default "results"
	Binary     string // the isrlab binary the nodes run; default this one
	// Out receives the run's report: the header, fault events, progress
	// and the verdict. A write error (a closed pipe) stops the run as a
	// signal would.
	Out io.Writer
	// Live redraws one progress line in place (a terminal); otherwise a
	// progress line is printed every ProgressEvery.
	Live          bool
	ProgressEvery time.Duration // default 10 s; negative: none
	Log           *slog.Logger
	// RunID names the run and its cluster; default a fresh one.
	RunID string
}

// Result is what a run produced.
type Result struct {
	Dir       string
	RunID     string
	Scenario  Scenario
	Verdict   *checker.Verdict
	Judgement Judgement
	// Incomplete marks a run cut short (a signal, a closed stdout): the
	// verdict is of what was recorded until then.
	Incomplete bool
	// Timing says where the run's wall time went.
	Timing *Timing
}

// Timing is where a run's wall time went (results.Timing, in outcome.json).
type Timing = results.Timing

// since returns the seconds since *mark and moves mark to now.
func since(mark *time.Time) float64 {
	now := time.Now()
	d := now.Sub(*mark).Seconds()
	*mark = now
	return d
}

// ErrInternal marks a failure of the lab itself (a result file that could
// not be written, a cluster that did not come up): exit status 255.
var ErrInternal = errors.New("internal error")

// Run runs sc once: cluster up, workload and faults, drain, check, judge.
// The run directory holds the resolved scenario (with its seed),
// history.jsonl, verdict.json, outcome.json and the nodes' logs and data;
// results/latest points at it. Whatever way the run ends — its duration, a
// cancelled ctx, an error, a panic — every fault is healed, the cluster is
// torn down and what was recorded is checked.
func Run(ctx context.Context, sc Scenario, o Options) (res Result, err error) {
	if sc.Seed == 0 {
		sc.Seed = time.Now().UnixNano()%1_000_000_000 + 1
	}
	// Validated once: the run plays the timeline validation computed.
	events, err := sc.Plan()
	if err != nil {
		return Result{}, err
	}
	o = o.withDefaults()
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrInternal, err)
		}
		o.Binary = exe
	}
	sc.Workload.Seed = sc.Seed
	runID := o.RunID
	if runID == "" {
		runID = compose.NewRunID()
	}
	start := time.Now()
	dir, err := filepath.Abs(results.RunDir(o.ResultsDir, sc.Name, start, runID))
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrInternal, err)
	}
	res = Result{Dir: dir, RunID: runID, Scenario: sc}
	if err := results.MakeDir(dir); err != nil {
		return res, fmt.Errorf("%w: %v", ErrInternal, err)
	}
	if err := results.WriteScenario(dir, sc); err != nil {
		return res, internalErr(err)
	}
	if err := results.LinkLatest(o.ResultsDir, dir); err != nil {
		return res, internalErr(err)
	}

	// A closed stdout stops the run like a signal: the user is gone.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := &stopWriter{w: o.Out, stop: func(err error) { cancel(fmt.Errorf("output closed: %w", err)) }}

	var kv []compose.KV
	for _, k := range slices.Sorted(maps.Keys(sc.Cluster.Config)) {
		kv = append(kv, compose.KV{Key: k, Value: sc.Cluster.Config[k]})
	}
	var topo compose.Topology
	caps, err := compose.CapabilitiesOf(sc.Cluster.Backend)
	if err != nil {
		return res, err
	}
	if caps.UserHosts {
		// The hosts' own cluster: the lab lays nothing out.
		topo, err = sc.Cluster.SSH.Topology("lab-"+runID, runID, filepath.Join(dir, "nodes"))
	} else {
		topo, err = compose.Build(compose.Options{
			Name: "lab-" + runID, RunID: runID, Coordinators: sc.Cluster.Coordinators, Brokers: sc.Cluster.Brokers,
			Clients: 1, BrokerConfig: kv, Binary: o.Binary, RunDir: filepath.Join(dir, "nodes"),
			FaultFS: sc.diskBrokers(), Subnet: runSubnet(caps, runID), Secured: sc.Cluster.Secured,
			// Kafka proxies in front of the brokers, where the backend can
			// lay them out; elsewhere the lab's clients dial through
			// proxies of their own (driver.run).
			KafkaProxy: caps.KafkaProxy && slices.Contains(sc.faultKinds(), "kafka"),
		})
	}
	if err != nil {
		return res, fmt.Errorf("%w: %v", ErrInternal, err)
	}
	backend, err := backends.New(sc.Cluster.Backend, backends.Options{KeepData: true, KillOnDown: true, Log: o.Log, SSH: sc.Cluster.SSH, CleanFaults: nemesis.CleanFaults})
	if err != nil {
		return res, fmt.Errorf("%w: %v", ErrInternal, err)
	}
	histPath := filepath.Join(dir, results.HistoryFile)
	fmt.Fprintf(out, "isrlab run %s (seed %d, run %s): %d coordinators, %d brokers, %s backend\n  results: %s\n",
		sc.Name, sc.Seed, runID, sc.Cluster.Coordinators, sc.Cluster.Brokers, orDefault(sc.Cluster.Backend, compose.Netns), dir)
	if sc.Description != "" {
		fmt.Fprintf(out, "  %s\n  expect: %s\n", sc.Description, sc.Expect)
	}
	var recorded bool
	var notSetUp *nemesis.NotSetUpError
	var workloadErr error
	var failedFaults []string
	var waited map[int]float64
	var unserved string
	tm := &Timing{}
	mark := start
	runErr := compose.Run(ctx, backend, topo, func(ctx context.Context, c *compose.Cluster) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("%w: panic: %v\n%s", ErrInternal, p, debug.Stack())
			}
			mark = time.Now()
		}()
		tm.Up = since(&mark)
		fmt.Fprintf(out, "  cluster up in %.1fs; bootstrap %s\n", tm.Up, strings.Join(c.Bootstrap(), ","))
		d := &driver{sc: sc, events: events, c: c, o: o, out: out, histPath: histPath, timing: tm}
		err = d.run(ctx)
		recorded, notSetUp, workloadErr, failedFaults, waited, unserved = d.started, d.notSetUp, d.workloadErr, d.failedFaults, d.waited, d.unserved
		return err
	})
	tm.Down = since(&mark)
	// The coordinators' etcd data (preallocated WAL) is of no use after
	// the run; their logs stay.
	for _, n := range topo.Role(compose.RoleCoordinator) {
		os.RemoveAll(filepath.Join(n.DataDir, "member"))
	}
	// Neither are the brokers' logs of a rate run that records no history
	// (gigabytes a minute at its rates); their log files stay.
	if sc.Workload.Type == "rate" && !sc.Workload.RecordHistory {
		removeBrokerData(topo)
	}
	res.Incomplete = ctx.Err() != nil
	if runErr != nil && (!res.Incomplete || !errors.Is(runErr, context.Canceled)) {
		kind := ErrInternal
		if errors.Is(runErr, compose.ErrTLSListener) {
			// The cluster's client config is missing, not the lab's fault.
			kind = ErrScenario
		}
		runErr = fmt.Errorf("%w: %v", kind, runErr)
	} else {
		runErr = nil
	}
	if !recorded {
		if runErr == nil && unserved != "" {
			fmt.Fprintf(out, "  could not set up: %s\n", unserved)
			res.Judgement = Judgement{Outcome: NotSetUp, Expect: sc.Expect.String(), Reasons: []string{unserved}}
			return res, nil
		}
		if runErr == nil && res.Incomplete {
			// Stopped before anything was recorded: nothing to judge.
			fmt.Fprintf(out, "  stopped before the workload started (%v)\n", context.Cause(ctx))
			res.Judgement = Judgement{Outcome: Undecided, Expect: sc.Expect.String(), Reasons: []string{"stopped before the workload started"}}
		}
		return res, runErr
	}
	if res.Incomplete {
		fmt.Fprintf(out, "  stopped early (%v): checking what was recorded\n", context.Cause(ctx))
	}
	// One read of the history: the verdict, what the faults touched and
	// the report's curves.
	v, hit, curves, err := analyzeRun(func() (io.ReadCloser, error) { return os.Open(histPath) }, histPath)
	if err != nil {
		return res, errors.Join(runErr, fmt.Errorf("%w: check %s: %v", ErrInternal, histPath, err))
	}
	res.Verdict = v
	ser, serr := summarizeSeries(dir, v, hit)
	if serr != nil {
		o.Log.Warn("series", "err", serr)
	}
	res.Judgement = sc.Expect.judgeSeries(sc.Expect.Judge(v), ser)
	sc.measureWaits(&res.Judgement, waited)
	end := runEnd{incomplete: res.Incomplete, failedFaults: failedFaults, workloadErr: workloadErr}
	if notSetUp != nil {
		end.notSetUp = notSetUp.Error()
	}
	res.Judgement = res.Judgement.settle(sc.Expect.String(), end)
	tm.Check = since(&mark)
	res.Timing = tm
	oc := &results.Outcome{Scenario: sc.Name, RunID: runID, Seed: sc.Seed, Started: start.UTC().Format(time.RFC3339),
		Seconds: time.Since(start).Seconds(), Incomplete: res.Incomplete, Valid: v.Valid, Anomalies: v.Anomalies, Series: ser, Timing: tm}
	res.Judgement.setIn(oc)
	// verdict.json, outcome.json, junit.xml and report.html.
	werr := internalErr(results.WriteRun(dir, v, oc, curves))
	results.WriteVerdict(out, oc, v)
	fmt.Fprintf(out, "  took %.1fs: workload %.1fs; up %.1fs, topic %.1fs, stop %.1fs, drain %.1fs, down %.1fs, check %.1fs, report %.1fs\n",
		time.Since(start).Seconds(), tm.Workload, tm.Up, tm.Setup, tm.Stop, tm.Drain, tm.Down, tm.Check, since(&mark))
	return res, errors.Join(runErr, werr)
}

func (o Options) withDefaults() Options {
	if o.ResultsDir == "" {
		o.ResultsDir = "results"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ProgressEvery == 0 {
		o.ProgressEvery = 10 * time.Second
	}
	return o
}

// runSubnet is the lab network of a run. Namespaces isolate each run's
// network, so netns runs share the default; Docker networks live in one
// address space, so each Docker run takes a /24 derived from its run id.
func runSubnet(caps compose.Capabilities, runID string) netip.Prefix {
	if !caps.SharedNetwork {
		return netip.Prefix{}
	}
	h := fnv.New32a()
	h.Write([]byte(runID))
	v := h.Sum32()
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + v%50), byte(v >> 8), 0}), 24)
}

// diskBrokers lists the brokers the scenario runs on faultfs.
func (s *Scenario) diskBrokers() []string {
	var out []string
	for _, d := range s.Cluster.Disk {
		if d == "faultfs" {
			out = out[:0]
			for i := 1; i <= s.Cluster.Brokers; i++ {
				out = append(out, fmt.Sprintf("b%d", i))
			}
			return out
		}
		out = append(out, d)
	}
	return out
}

// faultKinds lists the kinds of the faults the scenario can start, fixed
// or scheduled.
func (s *Scenario) faultKinds() []string {
	var out []string
	for _, f := range s.Faults {
		if f.Spec.Fault != nil && !slices.Contains(out, f.Spec.Fault.Kind()) {
			out = append(out, f.Spec.Fault.Kind())
		}
	}
	if s.Schedule != nil {
		for _, k := range s.Schedule.Kinds() {
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// unservedGroupProtocol says why a workload that asks for the consumer
// group protocol (KIP-848, group.protocol consumer) cannot have it: no
// broker lists ConsumerGroupHeartbeat. franz-go would fall back to the
// classic protocol without a word, and the run would test the other
// protocol than its story's.
func unservedGroupProtocol(ctx context.Context, adm *kadm.Client, clientConfig map[string]string) (string, error) {
	if clientConfig["group.protocol"] != "consumer" {
		return "", nil
	}
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return "", fmt.Errorf("ApiVersions: %w", err)
	}
	served := false
	vs.Each(func(v kadm.BrokerApiVersions) {
		if _, ok := v.KeyMaxVersion(int16(kmsg.ConsumerGroupHeartbeat)); ok && v.Err == nil {
			served = true
		}
	})
	if served {
		return "", nil
	}
	return "group.protocol consumer: the cluster does not serve the consumer group protocol (no broker lists ConsumerGroupHeartbeat); " +
		"set group.coordinator.rebalance.protocols: classic,consumer in the cluster config or use --preset kafka-4.0", nil
}

// driver runs one scenario against a cluster that is up.
type driver struct {
	sc       Scenario
	events   []nemesis.Event // sc's fault timeline (Scenario.Plan)
	c        *compose.Cluster
	o        Options
	out      io.Writer
	histPath string
	// started is set once the history file exists and has its header.
	started bool
	// notSetUp is the condition that did not hold in time, if one did not.
	notSetUp *nemesis.NotSetUpError
	// unserved is why the cluster cannot run the story at all, found
	// before the workload started (a protocol it does not serve).
	unserved string
	// workloadErr is why the workload stopped before the run's end, if it
	// did (read after the workload's goroutine is done).
	workloadErr error
	// failedFaults describes the faults whose injection failed.
	failedFaults []string
	// waited is how long each fault's wait took, by key (progress.waits).
	waited map[int]float64
	// timing gets the setup, workload, stop and drain phases.
	timing *Timing
}

func (d *driver) run(ctx context.Context) (err error) {
	sc, c, o := d.sc, d.c, d.o
	mark := time.Now()
	proxies := c.Proxies()
	if slices.Contains(sc.faultKinds(), "kafka") && !c.Caps().KafkaProxy {
		sockets, stop, unproxied, err := c.InlineProxies(ctx, o.Log)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInternal, err)
		}
		defer func() {
			stop()
			if ds := unproxied(); len(ds) > 0 {
				fmt.Fprintf(d.out, "  warning: kind: kafka faults did not reach the connections to %s (no broker address the lab knows)\n", strings.Join(ds, ", "))
			}
		}()
		proxies = sockets
		fmt.Fprintf(d.out, "  kind: kafka faults act on the lab's own client connections (the %s backend puts no proxy in front of its brokers): traffic between brokers passes untouched\n", c.Backend)
	}
	// The dialer from the client host, with TLS and SASL on a secured
	// cluster: the same for the admin client and the workload's clients.
	kafka, err := c.KafkaOpts()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInternal, err)
	}
	seeds := c.Bootstrap()
	adm, err := admin(seeds, kafka...)
	if err != nil {
		return err
	}
	defer adm.Close()
	if why, err := unservedGroupProtocol(ctx, kadm.NewClient(adm), sc.Workload.ClientSpec.Config); err != nil || why != "" {
		d.unserved = why
		return err
	}
	topic := sc.Topic
	if topic.Leader == LeaderTxnCoordinator {
		if topic.Replicas, err = placeAtTxnCoordinator(ctx, adm, topic, workloads.TxnIDPrefix(sc.Workload.Config, topic.Name)+"-0"); err != nil {
			return err
		}
	}
	assignment, err := createTopic(ctx, adm, topic)
	if err != nil {
		return err
	}
	f, err := results.CreateHistory(filepath.Dir(d.histPath))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInternal, err)
	}
	defer f.Close()
	w, err := history.NewWriter(f, history.Header{Run: c.RunID, Seed: sc.Seed, Topic: sc.Topic.Name, Partitions: int(sc.Topic.Partitions),
		Start: time.Now().UTC().Format(time.RFC3339), Replicas: assignment})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInternal, err)
	}
	d.started = true
	d.timing.Setup = since(&mark)
	t0 := time.Now()
	prog := newProgress(w, sc.Duration, t0)
	rec := history.NewRecorder(prog, func() time.Duration { return time.Since(t0) })
	// The workload's samples and the brokers' metrics, on the history's clock.
	sw, err := series.Create(filepath.Join(filepath.Dir(d.histPath), series.FileName), series.Header{Run: c.RunID, Start: t0.UTC().Format(time.RFC3339)},
		func() time.Duration { return time.Since(t0) })
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInternal, err)
	}
	defer func() {
		if serr := sw.Close(); serr != nil {
			o.Log.Warn("series", "err", serr)
		}
	}()
	// The history is flushed and its write errors surface whatever way
	// the run ends.
	defer func() {
		if ferr := rec.Flush(); ferr != nil {
			err = errors.Join(err, fmt.Errorf("%w: write %s: %v", ErrInternal, d.histPath, ferr))
		}
		if cerr := f.Close(); cerr != nil && !errors.Is(cerr, os.ErrClosed) {
			err = errors.Join(err, fmt.Errorf("%w: close %s: %v", ErrInternal, d.histPath, cerr))
		}
	}()

	auth, err := clientAuthOf(c)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInternal, err)
	}
	wl, err := newWorkload(sc.Workload, clientRun{ID: c.RunID, DriverLog: filepath.Join(filepath.Dir(d.histPath), "nodes", "client1", DriverLogFile)},
		rec, sw, auth, seeds, kafka...)
	if err != nil {
		return err
	}
	events := d.events
	nem := &nemesis.Nemesis{
		Env: &nemesis.Env{Cluster: c, Resolver: &nemesis.LiveResolver{Cluster: c}, Disks: c.Disks(), Proxies: proxies,
			Rand: rand.New(rand.NewSource(sc.Seed)), Log: o.Log,
			DelayerCommand: func(args []string) *exec.Cmd {
				return exec.Command(o.Binary, append(slices.Clone(nemesis.DelayerSubcommand), args...)...)
			}},
		Store:    &nemesis.Store{Path: nemesis.FaultsFile(compose.StateDir(), c.Name)},
		Recorder: rec,
	}

	var g group
	wctx, stopWorkload := context.WithCancel(ctx)
	defer stopWorkload()
	// workloadFailed closes when the workload stopped on its own with an
	// error (a client driver that died): the run ends there, undecided.
	workloadFailed := make(chan struct{})
	g.Go(func() error {
		if err := wl.Run(wctx); err != nil && wctx.Err() == nil {
			o.Log.Warn("workload", "err", err)
			d.workloadErr = err
			close(workloadFailed)
		}
		return nil
	})
	octx, stopObserver := context.WithCancel(ctx)
	defer stopObserver()
	var og group
	state := &stateView{}
	og.Go(func() error { observe(octx, &nemesis.LiveResolver{Cluster: c}, sc.Topic.Name, rec, state); return nil })
	og.Go(func() error { observeHW(octx, c, sc.Topic.Name, rec); return nil })
	og.Go(func() error { scrapeBrokers(octx, c, sw); return nil })
	nctx, stopNemesis := context.WithCancel(ctx)
	defer stopNemesis()
	var nemErr error
	// setUpFailed closes when a fault's condition did not hold in time:
	// the run ends there, as its story cannot happen.
	setUpFailed := make(chan struct{})
	g.Go(func() error {
		nemErr = nemesis.Play(nctx, nem, events, nemesis.PlayOptions{State: state.get})
		var nsu *nemesis.NotSetUpError
		if errors.As(nemErr, &nsu) {
			d.notSetUp = nsu
			close(setUpFailed)
		}
		return nil
	})
	pctx, stopProgress := context.WithCancel(ctx)
	var pg group
	pg.Go(func() error { prog.report(pctx, d.out, o.Live, o.ProgressEvery); return nil })

	fmt.Fprintf(d.out, "  workload running for %v with %d fault event(s)\n", sc.Duration, countStarts(events))
	select {
	case <-ctx.Done():
	case <-time.After(sc.Duration):
	case <-setUpFailed:
		prog.event("ending the run: its story could not be set up")
	case <-workloadFailed:
		prog.event("ending the run: the workload stopped: " + d.workloadErr.Error())
	}
	d.timing.Workload = since(&mark)
	// Faults end with the workload: nemesis.Play heals what it started.
	stopNemesis()
	stopWorkload()
	perr := g.Wait()
	// nemesis.Play healed what it started; anything still active (a heal
	// that failed) is retried once more.
	if act, _ := nem.Active(); len(act) > 0 {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		if herr := nem.HealAll(hctx); herr != nil {
			o.Log.Warn("heal", "err", herr)
		}
		cancel()
	}
	if nemErr != nil && !errors.Is(nemErr, context.Canceled) && d.notSetUp == nil {
		o.Log.Warn("faults", "err", nemErr)
	}
	d.timing.Stop = since(&mark)
	if perr == nil && ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		if err := compose.Ready(rctx, c, nil); err != nil {
			o.Log.Warn("cluster not ready before the drain", "err", err)
		}
		prog.event("faults healed; draining every partition")
		if err := wl.Drain(rctx); err != nil {
			o.Log.Warn("drain", "err", err)
		}
	}
	stopObserver()
	og.Wait()
	stopProgress()
	pg.Wait()
	d.timing.Drain = since(&mark)
	prog.flushEvents(d.out)
	d.failedFaults = prog.failed()
	d.waited = prog.waits()
	if perr != nil {
		return perr
	}
	return ctx.Err()
}

// runner is a workload as the driver runs it.
type runner interface {
	Run(context.Context) error
	Drain(context.Context) error
}

// newWorkload returns the scenario's workload, recording to rec (and the
// rate workload's samples to sw).
func newWorkload(w Workload, run clientRun, rec *history.Recorder, sw workloads.Sampler, auth *clientAuth, seeds []string, opts ...kgo.Opt) (runner, error) {
	switch w.Type {
	case "queue":
		// Its members are group members (NewQueue sets it too): an exec
		// driver's hello then asks for the protocol's queue feature.
		w.Config.Subscribe = true
		cl, err := newClient(w, run, auth, seeds, opts)
		if err != nil {
			return nil, err
		}
		q, err := workloads.NewQueueWith(cl, w.Config, rec, seeds, opts...)
		if err != nil {
			return nil, err
		}
		if w.ClientSpec.Name() == clients.FranzGo {
			// group.protocol (classic, consumer) and group.remote.assignor.
			if err := q.UseGroupProtocol(w.ClientSpec.Config); err != nil {
				return nil, err
			}
		}
		return q, nil
	case "rate":
		return workloads.NewRate(w.Config, rec, sw, seeds, opts...)
	case "txn":
		cl, err := newClient(w, run, auth, seeds, opts)
		if err != nil {
			return nil, err
		}
		tw, err := workloads.NewTxnWith(cl, w.Config, rec, seeds, opts...)
		if err != nil {
			return nil, err
		}
		if w.ClientSpec.Name() == clients.FranzGo {
			// group.protocol (classic, consumer) and group.remote.assignor
			// of the txn.group.id sessions.
			if err := tw.UseGroupProtocol(w.ClientSpec.Config); err != nil {
				return nil, err
			}
		}
		return tw, nil
	}
	cl, err := newClient(w, run, auth, seeds, opts)
	if err != nil {
		return nil, err
	}
	return workloads.NewLogWith(cl, w.Config, rec, seeds, opts...)
}

func countStarts(ev []nemesis.Event) int {
	n := 0
	for _, e := range ev {
		if e.Action == nemesis.ActStart {
			n++
		}
	}
	return n
}

// group runs goroutines and turns their panics into errors, so that a
// panic in a workload still lets the run heal and tear down.
type group struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func (g *group) Go(fn func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer func() {
			if p := recover(); p != nil {
				g.mu.Lock()
				g.errs = append(g.errs, fmt.Errorf("%w: panic: %v\n%s", ErrInternal, p, debug.Stack()))
				g.mu.Unlock()
			}
		}()
		if err := fn(); err != nil {
			g.mu.Lock()
			g.errs = append(g.errs, err)
			g.mu.Unlock()
		}
	}()
}

func (g *group) Wait() error {
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.errs...)
}

func admin(seeds []string, kafka ...kgo.Opt) (*kgo.Client, error) {
	// A fresh cluster's first Metadata answer may name no controller yet
	// (a broker that has not heard from it): the retry's refresh must not
	// wait out kgo's default 5 s minimum metadata age.
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.MetadataMinAge(100 * time.Millisecond)}, kafka...)...)
}

// createTopic creates the scenario's topic (with its manual assignment,
// if it has one), waits for full ISRs and returns the assignment.
func createTopic(ctx context.Context, cl *kgo.Client, t Topic) (map[int32][]int32, error) {
	adm := kadm.NewClient(cl)
	cfg := map[string]*string{}
	for k, v := range t.Config {
		cfg[k] = &v
	}
	deadline := time.Now().Add(60 * time.Second)
	var lastErr error
	err := until(ctx, deadline, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if len(t.Replicas) > 0 {
			lastErr = createAssigned(cctx, cl, t, cfg)
		} else {
			_, lastErr = adm.CreateTopic(cctx, t.Partitions, t.ReplicationFactor, cfg, t.Name)
		}
		return lastErr == nil || errors.Is(lastErr, kerr.TopicAlreadyExists)
	})
	if err != nil {
		return nil, fmt.Errorf("create topic %s: %w", t.Name, errors.Join(err, lastErr))
	}
	assignment := map[int32][]int32{}
	err = until(ctx, deadline, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		tds, err := adm.ListTopics(cctx, t.Name)
		lastErr = err
		if err != nil {
			return false
		}
		ok := len(tds[t.Name].Partitions) == int(t.Partitions)
		for _, p := range tds[t.Name].Partitions {
			ok = ok && p.Leader >= 0 && len(p.ISR) == int(t.ReplicationFactor)
			assignment[p.Partition] = slices.Clone(p.Replicas)
		}
		return ok
	})
	if err != nil {
		return nil, fmt.Errorf("topic %s not online with full ISRs: %w", t.Name, errors.Join(err, lastErr))
	}
	return assignment, nil
}

// placeAtTxnCoordinator returns t's assignment with partition 0 led by
// the coordinator of transactional id txnID (Topic.Leader), the other
// replicas and partitions following in broker order. Finding the
// coordinator creates the transaction state topic if it does not exist;
// until it is online the broker answers COORDINATOR_NOT_AVAILABLE.
func placeAtTxnCoordinator(ctx context.Context, cl *kgo.Client, t Topic, txnID string) (map[int32][]int32, error) {
	adm := kadm.NewClient(cl)
	var coord int32 = -1
	var ids []int32
	var lastErr error
	err := until(ctx, time.Now().Add(60*time.Second), func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r := adm.FindTxnCoordinators(cctx, txnID)[txnID]
		if lastErr = r.Err; r.Err != nil {
			return false
		}
		bs, err := adm.ListBrokers(cctx)
		if lastErr = err; err != nil {
			return false
		}
		coord, ids = r.NodeID, bs.NodeIDs()
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("topic %s: find the coordinator of transactional id %s: %w", t.Name, txnID, errors.Join(err, lastErr))
	}
	slices.Sort(ids)
	first := slices.Index(ids, coord)
	if first < 0 || len(ids) < int(t.ReplicationFactor) {
		return nil, fmt.Errorf("topic %s: transaction coordinator %d among brokers %v, replication factor %d", t.Name, coord, ids, t.ReplicationFactor)
	}
	out := make(map[int32][]int32, t.Partitions)
	for p := range t.Partitions {
		rs := make([]int32, t.ReplicationFactor)
		for j := range rs {
			rs[j] = ids[(first+int(p)+j)%len(ids)]
		}
		out[p] = rs
	}
	return out, nil
}

// createAssigned creates t with its manual replica assignment (kadm's
// CreateTopic takes counts only).
func createAssigned(ctx context.Context, cl *kgo.Client, t Topic, cfg map[string]*string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Name, -1, -1
	for _, p := range slices.Sorted(maps.Keys(t.Replicas)) {
		ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		ra.Partition, ra.Replicas = p, t.Replicas[p]
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	}
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, cfg[k]
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, tr := range resp.Topics {
		if err := kerr.ErrorForCode(tr.ErrorCode); err != nil {
			if tr.ErrorMessage != nil {
				return fmt.Errorf("%w: %s", err, *tr.ErrorMessage)
			}
			return err
		}
	}
	return nil
}

// until polls cond every 200 ms until it holds, ctx ends or the deadline
// passes.
func until(ctx context.Context, deadline time.Time, cond func() bool) error {
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// stateView is the latest cluster state observe saw: what the run records
// and what the faults' conditions read.
type stateView struct {
	mu   sync.Mutex
	v    nemesis.View
	seen bool
}

func (s *stateView) set(v nemesis.View) {
	s.mu.Lock()
	s.v, s.seen = v, true
	s.mu.Unlock()
}

// get returns the latest view and whether there is one.
func (s *stateView) get() (nemesis.View, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v, s.seen
}

// observe reads the topic's partitions every 250 ms from every broker's
// metadata, merged as the nemesis resolves targets (the controller's own
// answer wins a tie of leader epochs), publishes the view to state, and
// records a cluster-state event whenever a partition's leader or ISR
// changes.
func observe(ctx context.Context, r *nemesis.LiveResolver, topic string, rec *history.Recorder, state *stateView) {
	type key struct {
		leader int32
		isr    string
	}
	last := map[int32]key{}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := r.Partitions(cctx, []string{topic})
		cancel()
		if err == nil {
			state.set(v)
			for _, name := range slices.Sorted(maps.Keys(v.Partitions)) {
				t, p, err := nemesis.ParseTopicPartition(name)
				if err != nil || t != topic {
					continue
				}
				pv := v.Partitions[name]
				isr := slices.Sorted(slices.Values(pv.ISR))
				k := key{pv.Leader, fmt.Sprint(isr)}
				if last[p] == k {
					continue
				}
				last[p] = k
				op := history.NewOp(history.Cluster, history.Info, history.FState)
				op.Partition, op.Leader, op.Epoch, op.ISR = p, pv.Leader, pv.LeaderEpoch, isr
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

// observeHW records each leader's high watermark of the topic's
// partitions, read from every broker's side channel every 500 ms, as
// state ops carrying the reporting leader (Node), its epoch and the HW, whenever
// it moved. A zombie leader's HW shows up beside the real leader's.
func observeHW(ctx context.Context, c *compose.Cluster, topic string, rec *history.Recorder) {
	dial := c.Dial()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return dial(ctx, network, addr) },
	}}
	defer hc.CloseIdleConnections()
	type key struct{ broker, partition int32 }
	last := map[key]int64{}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		for _, b := range c.Of(compose.RoleBroker) {
			api := clusterapi.Client{Base: clusterapi.BaseURL(b.Addr.String(), compose.MetricsPort), HTTP: hc}
			snap, err := api.Partitions(ctx)
			if err != nil {
				continue // down, paused or cut off: nothing to record
			}
			for _, p := range snap.Partitions {
				k := key{snap.Broker, p.Partition}
				if p.Topic != topic || p.Role != "leader" || last[k] == p.HighWatermark+1 {
					continue
				}
				last[k] = p.HighWatermark + 1
				op := history.NewOp(history.Cluster, history.Info, history.FState)
				// The reporting leader goes in Node, not Leader: a zombie's
				// HW must not read as a leader change.
				op.Partition, op.Node, op.Epoch, op.HW = p.Partition, b.Name, p.LeaderEpoch, p.HighWatermark
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

// internalErr marks err (a result file that could not be written) as the
// lab's own failure.
func internalErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", ErrInternal, err)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// stopWriter passes writes through until the first error, then calls stop
// once and drops everything after.
type stopWriter struct {
	mu     sync.Mutex
	w      io.Writer
	failed bool
	stop   func(error)
}

func (s *stopWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return len(p), nil
	}
	if _, err := s.w.Write(p); err != nil {
		s.failed = true
		s.stop(err)
	}
	return len(p), nil
}

// runEnd is how a run went, as far as its judgement cares.
type runEnd struct {
	incomplete   bool     // cut short (a signal, a closed stdout)
	notSetUp     string   // the condition a fault waited for in vain
	failedFaults []string // the faults that could not be injected
	workloadErr  error    // the workload stopped before the end
}

// settle turns the judgement of a run's history into the run's outcome,
// given how the run went (e is the expectation's text).
func (j Judgement) settle(e string, end runEnd) Judgement {
	if end.notSetUp != "" && !end.incomplete {
		// The story never happened: whatever the history shows, the
		// expectation was not put to the test.
		return Judgement{Outcome: NotSetUp, Expect: e, Reasons: []string{end.notSetUp}}
	}
	if len(end.failedFaults) > 0 && (j.Outcome == Met || (j.Outcome == NotMet && !j.found)) {
		// A fault that was never injected did not put the expectation to
		// the test: neither met nor a claim the missing fault would have
		// made true (an outage, a loss) is a verdict on the story. An
		// anomaly found without it stands (Judgement.found).
		return Judgement{Outcome: NotSetUp, Expect: e,
			Reasons: append([]string{"a fault could not be injected, so the story did not happen"}, end.failedFaults...)}
	}
	if end.incomplete && !j.found {
		// Cut short: what was recorded was judged, and an anomaly found
		// stands, but neither a met expectation nor a loss, an outage or
		// a churn the run was still to show, or a bound its last moments
		// may have crossed (operations cut off look like an outage), was
		// put to the test.
		j.Outcome = Undecided
		j.Reasons = append(j.Reasons, "the run was cut short")
	}
	if end.workloadErr != nil && !end.incomplete {
		// The workload did not run its course (its client died or hung):
		// what it recorded was checked, and an anomaly found in it stands,
		// but neither a met expectation nor a missed one was put to the
		// test for the run's duration: an anomaly the rest of the run was
		// to show, an outage that is the client's hang.
		if !j.found { // a met judgement found nothing either
			j.Outcome = Undecided
		}
		j.Reasons = append([]string{"the workload stopped before the end: " + end.workloadErr.Error()}, j.Reasons...)
	}
	return j
}
