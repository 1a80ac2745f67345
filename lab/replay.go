package lab

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/results"
)

// RecordedFault is one fault as a run's history recorded it: when its
// injection began (the start's invoke) and ended (its ok), when its heal
// began (the stop's invoke, or a heal of everything), and its spec as it
// went in, with the nodes it resolved to.
type RecordedFault struct {
	Kind    string          `json:"kind"`
	Start   time.Duration   `json:"start"`
	In      time.Duration   `json:"in"`
	Stop    time.Duration   `json:"stop,omitempty"` // 0: never healed before the run ended
	Spec    json.RawMessage `json:"spec"`
	Healed  string          `json:"healed,omitempty"` // "stop", "heal" (all), "" (not recorded)
	Skipped string          `json:"skipped,omitempty"`
}

// nemesisOp is what replay reads of a history line.
type nemesisOp struct {
	Time    int64           `json:"time"`
	Process json.RawMessage `json:"process"`
	Type    string          `json:"type"`
	F       string          `json:"f"`
	Value   json.RawMessage `json:"value"`
}

// ReadRecordedFaults reads the faults of a history: each start that went
// in (an ok completion) paired with the first later stop of the same
// fault (the same spec as it went in) or heal of everything. Starts that
// failed are listed with Skipped set. Only the nemesis's lines are
// decoded, so a long history reads at the speed of the disk.
func ReadRecordedFaults(r io.Reader) ([]RecordedFault, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	var out []RecordedFault
	invoked := map[string]time.Duration{} // start f -> its pending invoke's time
	active := map[int]string{}            // index in out -> canonical spec
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if !bytes.Contains(b, []byte(`"nemesis"`)) {
			continue
		}
		var op nemesisOp
		if err := json.Unmarshal(b, &op); err != nil {
			return nil, fmt.Errorf("history line %d: %w", line, err)
		}
		if string(op.Process) != `"nemesis"` {
			continue
		}
		at := time.Duration(op.Time)
		switch {
		case strings.HasPrefix(op.F, "start-"):
			switch op.Type {
			case history.Invoke.String():
				invoked[op.F] = at
			case history.OK.String():
				start, ok := invoked[op.F]
				if !ok {
					start = at
				}
				delete(invoked, op.F)
				out = append(out, RecordedFault{Kind: strings.TrimPrefix(op.F, "start-"), Start: start, In: at, Spec: op.Value})
				active[len(out)-1] = canonJSON(op.Value)
			default:
				start := invoked[op.F]
				delete(invoked, op.F)
				out = append(out, RecordedFault{Kind: strings.TrimPrefix(op.F, "start-"), Start: start, In: at, Spec: op.Value,
					Skipped: "its injection did not complete (" + op.Type + ")"})
			}
		case strings.HasPrefix(op.F, "stop-") && op.Type == history.Invoke.String():
			spec := canonJSON(op.Value)
			for _, i := range slices.Sorted(maps.Keys(active)) {
				if active[i] == spec {
					out[i].Stop, out[i].Healed = at, "stop"
					delete(active, i)
					break
				}
			}
		case op.F == history.FHeal && op.Type == history.Invoke.String():
			for i := range active {
				out[i].Stop, out[i].Healed = at, "heal"
			}
			clear(active)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history line %d: %w", line+1, err)
	}
	return out, nil
}

func canonJSON(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

// replaySpec is the fault a recorded one replays as: the recorded nodes
// instead of the target expressions (a partition's recorded cut as a
// grudge), without the fields a fault fills in when it fires. It returns
// several faults for a reassignment of several partitions, and why a
// fault cannot be replayed exactly (its targets are then re-resolved).
func replaySpec(raw json.RawMessage) ([]nemesis.Spec, string, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", err
	}
	kind, _ := m["kind"].(string)
	strip := func(m map[string]any) {
		for _, k := range nemesis.RuntimeFields(kind) {
			delete(m, k)
		}
	}
	one := func(m map[string]any) ([]nemesis.Spec, string, error) {
		s, err := specFromMap(m)
		return []nemesis.Spec{s}, "", err
	}
	switch kind {
	case "partition":
		// The links cut; histories recorded before runs were kept apart
		// from specs hold them in "grudge".
		g, ok := m["cut"].(map[string]any)
		if !ok || len(g) == 0 {
			g, ok = m["grudge"].(map[string]any)
		}
		if !ok || len(g) == 0 {
			strip(m)
			s, err := specFromMap(m)
			return []nemesis.Spec{s}, "no recorded cut: its topology is resolved again", err
		}
		out := map[string]any{"kind": "partition", "topology": nemesis.TopoGrudge, "grudge": g}
		return one(out)
	case "reassign":
		moves, _ := m["moves"].([]any)
		if len(moves) == 0 {
			strip(m)
			s, err := specFromMap(m)
			return []nemesis.Spec{s}, "no recorded moves: they are drawn again", err
		}
		var out []nemesis.Spec
		for _, mv := range moves {
			mm, _ := mv.(map[string]any)
			s, err := specFromMap(map[string]any{"kind": "reassign", "partition": fmt.Sprintf("%v/%v", mm["topic"], mm["partition"]), "replicas": mm["to"]})
			if err != nil {
				return nil, "", err
			}
			out = append(out, s)
		}
		return out, "", nil
	case "slow-disk", "disk-error", "disk-hang":
		if socks, ok := m["sockets"].(map[string]any); ok && len(socks) > 0 {
			m["nodes"] = slices.Sorted(maps.Keys(socks))
		}
	default:
		if r, ok := m["resolved"].([]any); ok && len(r) > 0 {
			m["nodes"] = r
		}
	}
	strip(m)
	return one(m)
}

// ReplayPlan is an exact replay of a stored run: its scenario with the
// faults fixed as the run recorded them, and what could not be fixed.
type ReplayPlan struct {
	Scenario Scenario
	Faults   []RecordedFault
	// Notes say what the replay does not make identical.
	Notes []string
}

// ReplayScenario builds the exact replay of the run in runDir: the stored
// scenario and seed, with every fault that went in replaced by a fixed
// fault on the nodes it resolved to (target expressions are not resolved
// again), fired at the offset its injection began (at: the start's
// invoke) and healed as long after its injection completed as its heal
// began (heal.after: the stop's invoke minus the start's ok, since a
// hold counts from the injection, as the original's did). Conditions and
// the generated schedule are gone: the recorded times already hold them.
func ReplayScenario(runDir string) (*ReplayPlan, error) {
	sc, err := Load(filepath.Join(runDir, results.ScenarioFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a run directory: %v", ErrScenario, runDir, err)
	}
	f, err := os.Open(filepath.Join(runDir, results.HistoryFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrScenario, runDir, err)
	}
	defer f.Close()
	hr, err := history.NewReader(f, results.HistoryFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrScenario, runDir, err)
	}
	hdr := hr.Header()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, internalErr(err)
	}
	rec, err := ReadRecordedFaults(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrScenario, runDir, err)
	}
	plan := &ReplayPlan{Faults: rec}
	out := sc.clone()
	out.Name = strings.TrimSuffix(sc.Name, "-replay") + "-replay"
	out.Description = "exact replay of " + runDir
	out.Schedule, out.Faults = nil, nil
	switch {
	case len(sc.Topic.Replicas) > 0:
	case sc.Topic.Leader != "":
		plan.Notes = append(plan.Notes, "the topic's leaders are placed by topic.leader ("+sc.Topic.Leader+") as in the original, not by its assignment: they follow where the cluster put the coordinator this time")
	case len(hdr.Replicas) > 0:
		// The same brokers lead first: the topic is created with the
		// original's assignment, whose first replicas the controller
		// elects.
		out.Topic.Replicas = hdr.Replicas
	default:
		plan.Notes = append(plan.Notes, "the history has no replica assignment (a run before isrlab recorded it): the first leaders are elected afresh")
	}
	for i, r := range rec {
		if r.Skipped != "" {
			plan.Notes = append(plan.Notes, fmt.Sprintf("fault %d (%s at %v) is left out: %s", i+1, r.Kind, r.Start.Round(time.Millisecond), r.Skipped))
			continue
		}
		specs, note, err := replaySpec(r.Spec)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: fault %d (%s): %v", ErrScenario, runDir, i+1, r.Kind, err)
		}
		if note != "" {
			plan.Notes = append(plan.Notes, fmt.Sprintf("fault %d (%s): %s", i+1, r.Kind, note))
		}
		at := r.Start.Round(time.Millisecond)
		var hold time.Duration
		if r.Stop > 0 && r.Stop < sc.Duration {
			hold = max((r.Stop - r.In).Round(time.Millisecond), time.Millisecond)
		}
		for _, s := range specs {
			out.Faults = append(out.Faults, Fault{Spec: s, At: min(at, sc.Duration), HealAfter: hold})
		}
	}
	if err := out.Validate(); err != nil {
		return nil, err
	}
	plan.Scenario = out
	return plan, nil
}

// AnomalyKinds is the set of anomaly kinds with a count, sorted.
func AnomalyKinds(m map[string]int64) []string {
	var out []string
	for k, n := range m {
		if n > 0 {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// WriteAnomalies prints two runs' anomaly counts side by side, every kind
// either shows, with their outcomes.
func WriteAnomalies(w io.Writer, names [2]string, a, b map[string]int64, outcomes [2]string) {
	kinds := AnomalyKinds(a)
	for _, k := range AnomalyKinds(b) {
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	width := len("outcome")
	for _, k := range kinds {
		width = max(width, len(k))
	}
	cw := max(len(names[0]), len(names[1]), 10)
	fmt.Fprintf(w, "  %-*s  %*s  %*s\n", width, "anomaly", cw, names[0], cw, names[1])
	for _, k := range kinds {
		fmt.Fprintf(w, "  %-*s  %*d  %*d\n", width, k, cw, a[k], cw, b[k])
	}
	if len(kinds) == 0 {
		fmt.Fprintf(w, "  %-*s  %*s  %*s\n", width, "(none)", cw, "", cw, "")
	}
	fmt.Fprintf(w, "  %-*s  %*s  %*s\n", width, "outcome", cw, outcomes[0], cw, outcomes[1])
}

func marshalYAML(v any) ([]byte, error) { return yaml.Marshal(v) }
