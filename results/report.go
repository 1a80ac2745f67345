package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/svgplot"
)

// WriteReport writes report.html into the run directory dir.
func WriteReport(dir string) error {
	return writeReport(dir, RunReport)
}

// writeReport writes the page build makes of dir as its report.html.
func writeReport(dir string, build func(fs.FS, string) ([]byte, error)) error {
	b, err := build(os.DirFS(dir), filepath.Base(dir))
	if err != nil {
		return fmt.Errorf("report %s: %w", dir, err)
	}
	return WriteFile(filepath.Join(dir, ReportFile), b)
}

// RunReport builds the report of the run directory run: one self-contained
// HTML file. It streams history.jsonl once; when the run has no
// verdict.json (a run cut short before its check) the history is checked
// in the same pass, without linearizability. name labels the page.
func RunReport(run fs.FS, name string) ([]byte, error) {
	return reportWith(run, name, nil)
}

// reportWith is RunReport with the history's curves, when the caller has
// them (nil: they are read from history.jsonl).
func reportWith(run fs.FS, name string, curves *Curves) ([]byte, error) {
	d := runPage{Name: name, Style: template.CSS(reportCSS), Curves: curves}
	var err error
	if d.Outcome, err = ReadOutcome(run); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if d.Verdict, err = ReadVerdict(run); errors.Is(err, fs.ErrNotExist) {
		open := func() (io.ReadCloser, error) { return run.Open(HistoryFile) }
		opt := checker.Options{Linearizable: checker.LinOff}
		if d.Curves == nil {
			d.Curves = NewCurves()
			opt.Also = []history.Consumer{d.Curves}
		}
		d.Verdict, err = checker.Check(open, HistoryFile, opt)
		if err != nil {
			return nil, fmt.Errorf("no %s, and checking %s: %w", VerdictFile, HistoryFile, err)
		}
		d.Notes = append(d.Notes, "This run has no verdict.json (it was cut short before its check): the verdict below was computed by the report, without linearizability.")
	} else if err != nil {
		return nil, err
	}
	if b, err := fs.ReadFile(run, ScenarioFile); err == nil {
		d.Scenario = string(b)
	}
	if d.Curves == nil {
		f, err := run.Open(HistoryFile)
		if err != nil {
			return nil, err
		}
		d.Curves, err = ReadCurves(f, HistoryFile)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	if d.Curves.Torn != "" {
		d.Notes = append(d.Notes, "The history ends in a torn line: "+d.Curves.Torn)
	}
	if d.Curves.Late > 0 {
		d.Notes = append(d.Notes, fmt.Sprintf("%d operations with times outside the run were left out of the plots.", d.Curves.Late))
	}
	d.Figures = newPlotter(d.Curves, d.Verdict).figures()
	d.fill(run)
	var buf bytes.Buffer
	if err := runTmpl.Execute(&buf, &d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// runPage is what the run report template shows.
type runPage struct {
	Name     string
	Style    template.CSS
	Outcome  *Outcome
	Verdict  *checker.Verdict
	Curves   *Curves
	Scenario string
	Notes    []string
	Figures  []figure
	Faults   []svgplot.Band
	Anoms    []anomalyRow
	Unavail  []checker.PartitionUnavailability
	Latency  []latencyRow
	Logs     []string
	Files    []string
	Lin      string // porcupine's visualization, when present
}

type anomalyRow struct {
	Name     string
	Count    int64
	Examples []exampleRow
}

type exampleRow struct {
	Note string
	Ops  []opRow
}

type opRow struct {
	Time string
	JSON string // the op, cut at maxOpShown
	Full string // the op up to maxOpFull, when JSON was cut
}

const (
	maxOpShown = 320
	maxOpFull  = 20000
)

type latencyRow struct {
	F string
	Q checker.Quantiles
}

func (d *runPage) fill(run fs.FS) {
	v := d.Verdict
	d.Faults = faultBands(d.Curves, v)
	for _, k := range anomalyKinds(v.Anomalies) {
		row := anomalyRow{Name: k, Count: v.Anomalies[k]}
		for _, ex := range v.Examples[k] {
			er := exampleRow{Note: ex.Note}
			for _, raw := range ex.Ops {
				or := opRow{JSON: string(raw)}
				if len(raw) > maxOpShown {
					or.JSON, or.Full = string(raw[:maxOpShown])+"…", string(raw[:min(len(raw), maxOpFull)])
					if len(raw) > maxOpFull {
						or.Full += fmt.Sprintf("… (%d bytes in all)", len(raw))
					}
				}
				var op history.Op
				if history.DecodeOp(raw, &op) == nil {
					or.Time = fmt.Sprintf("%.3fs", float64(op.Time)/1e9)
				}
				er.Ops = append(er.Ops, or)
			}
			row.Examples = append(row.Examples, er)
		}
		d.Anoms = append(d.Anoms, row)
	}
	d.Unavail = v.Unavailability.Partitions
	fs2 := make([]string, 0, len(v.Latency))
	for f := range v.Latency {
		fs2 = append(fs2, f)
	}
	sort.Strings(fs2)
	for _, f := range fs2 {
		d.Latency = append(d.Latency, latencyRow{F: f, Q: v.Latency[f]})
	}
	// Node logs: nodes/<node>/*.log.
	nodes, _ := fs.ReadDir(run, NodesDir)
	for _, n := range nodes {
		if !n.IsDir() {
			continue
		}
		logs, _ := fs.Glob(run, path.Join(NodesDir, n.Name(), "*.log"))
		d.Logs = append(d.Logs, logs...)
	}
	for _, f := range []string{ScenarioFile, HistoryFile, VerdictFile, OutcomeFile, JUnitFile} {
		if st, err := fs.Stat(run, f); err == nil && st.Mode().IsRegular() {
			d.Files = append(d.Files, f)
		}
	}
	if st, err := fs.Stat(run, LinearizabilityFile); err == nil && st.Mode().IsRegular() {
		d.Lin = LinearizabilityFile
	} else if v.Linearizable.Visualization != "" && !strings.ContainsAny(v.Linearizable.Visualization, "/\\") {
		if _, err := fs.Stat(run, v.Linearizable.Visualization); err == nil {
			d.Lin = v.Linearizable.Visualization
		}
	}
}

var funcs = template.FuncMap{
	"pct": func(r checker.Ratio) string {
		if r.Total == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f%% (%d/%d)", 100*r.Fraction, r.OK, r.Total)
	},
	"sec": func(s float64) string {
		if s < 0 {
			return "never healed"
		}
		return fmt.Sprintf("%.3fs", s)
	},
	"ms":       svgplot.MsLabel,
	"status":   statusClass,
	"upper":    strings.ToUpper,
	"anomtext": anomalyText,
	"json": func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	},
	"f3":   func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"f1":   func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"join": strings.Join,
}

// statusClass maps an outcome or cell status to a CSS class.
func statusClass(s string) string {
	switch s {
	case Met:
		return "met"
	case NotMet:
		return "notmet"
	case Undecided, NotSetUp:
		return "undecided"
	case "error":
		return "error"
	case "skipped":
		return "skipped"
	}
	return "none"
}

var runTmpl = template.Must(template.New("run").Funcs(funcs).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>isrlab run {{with .Outcome}}{{.Scenario}}{{else}}{{.Name}}{{end}}</title>
<style>{{.Style}}</style></head>
<body>
<header>
{{with .Outcome}}
<h1>{{.Scenario}} <span class="badge {{status .Outcome}}" id="outcome">{{upper .Outcome}}</span></h1>
<p class="sub">run {{.RunID}} · seed {{.Seed}} · started {{.Started}} · {{f1 .Seconds}}s{{if .Incomplete}} · <b>incomplete: cut short</b>{{end}}</p>
{{else}}
<h1>{{.Name}} <span class="badge none" id="outcome">NO OUTCOME</span></h1>
<p class="sub">this run has no outcome.json</p>
{{end}}
</header>
<main>
{{range .Notes}}<p class="note">{{.}}</p>{{end}}
<section id="summary"><h2>Verdict and expectation</h2>
<table class="kv">
<tr><th>valid</th><td id="valid">{{.Verdict.Valid}}</td></tr>
{{with .Outcome}}<tr><th>expectation</th><td id="expect">{{.Expect}}</td></tr>
<tr><th>outcome</th><td><span class="badge {{status .Outcome}}">{{.Outcome}}</span>{{range .Reasons}}<div class="reason">{{.}}</div>{{end}}</td></tr>{{end}}
<tr><th>anomalies</th><td>{{anomtext .Verdict.Anomalies}}</td></tr>
<tr><th>operations</th><td>{{.Verdict.Stats.Ops}} ({{.Verdict.Stats.Sends}} sends: ok {{.Verdict.Stats.SendsOK}}, fail {{.Verdict.Stats.SendsFail}}, info {{.Verdict.Stats.SendsInfo}}, pending {{.Verdict.Stats.SendsPending}}; {{.Verdict.Stats.Polls}} polls, {{.Verdict.Stats.Records}} records read)</td></tr>
<tr><th>availability</th><td id="availability">overall {{pct .Verdict.Availability.Overall}}{{if .Verdict.Availability.Faults}}, during faults {{pct .Verdict.Availability.DuringFaults}}, after healing {{pct .Verdict.Availability.AfterHeal}} ({{.Verdict.Availability.Faults}} faults){{end}}</td></tr>
<tr><th>unavailability</th><td id="unavailability">{{with .Verdict.Unavailability}}{{if lt .MaxPartition 0}}no partition over {{.ThresholdSeconds}}s without a successful send{{else}}longest {{f3 .MaxWindow}}s on partition {{.MaxPartition}} (windows over {{.ThresholdSeconds}}s count){{end}}{{end}}</td></tr>
<tr><th>linearizable</th><td id="linearizable">{{.Verdict.Linearizable.Result}}{{with .Verdict.Linearizable.Reason}} ({{.}}){{end}}{{if .Lin}} · <a href="{{.Lin}}" id="porcupine">porcupine's visualization</a>{{end}}</td></tr>
<tr><th>cluster</th><td>{{.Verdict.Cluster.Events}} state events, {{.Verdict.Cluster.LeaderChanges}} leader changes, {{.Verdict.Cluster.ISRShrinks}} ISR shrinks, {{.Verdict.Cluster.ISRExpands}} ISR expands</td></tr>
</table>
</section>

<section id="plots"><h2>Over time</h2>
{{range .Figures}}<figure id="plot-{{.ID}}"><figcaption><b>{{.Title}}</b> — {{.Caption}}</figcaption>{{.SVG}}</figure>
{{end}}
</section>

<section id="faults"><h2>Faults</h2>
{{if .Faults}}<table><tr><th>fault</th><th>targets</th><th>start</th><th>end</th></tr>
{{range .Faults}}<tr class="fault-row"><td>{{.Name}}</td><td>{{.Label}}</td><td>{{sec .Start}}</td><td>{{sec .End}}</td></tr>{{end}}
</table>{{else}}<p>No faults.</p>{{end}}
</section>

<section id="anomalies"><h2>Anomalies</h2>
{{if .Anoms}}<table class="anomalies"><tr><th>anomaly</th><th>count</th><th>examples (the operations, with their times)</th></tr>
{{range .Anoms}}<tr class="anomaly" data-anomaly="{{.Name}}"><td>{{.Name}}</td><td class="num">{{.Count}}</td><td>
{{range .Examples}}<div class="example"><div>{{.Note}}</div>{{range .Ops}}<div class="op"><span class="t">{{.Time}}</span> <code>{{.JSON}}</code>{{if .Full}}<details><summary>the whole operation</summary><code>{{.Full}}</code></details>{{end}}</div>{{end}}</div>{{end}}
</td></tr>{{end}}</table>{{else}}<p>None found.</p>{{end}}
</section>

<section id="partitions"><h2>Availability per partition</h2>
<table><tr><th>partition</th><th>sends</th><th>ok</th><th>pending</th><th>windows</th><th>longest</th><th>from</th><th>to</th><th>total</th></tr>
{{range .Unavail}}<tr><td>{{.Partition}}</td><td class="num">{{.Sends}}</td><td class="num">{{.SendsOK}}</td><td class="num">{{.SendsPending}}</td><td class="num">{{.Windows}}</td><td class="num">{{f3 .Longest}}s</td><td class="num">{{f3 .LongestStart}}s</td><td class="num">{{f3 .LongestEnd}}s</td><td class="num">{{f3 .Total}}s</td></tr>{{end}}
</table>
{{if .Latency}}<h3>Latency (ok operations)</h3>
<table><tr><th>op</th><th>count</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>
{{range .Latency}}<tr><td>{{.F}}</td><td class="num">{{.Q.Count}}</td><td class="num">{{ms .Q.P50}}</td><td class="num">{{ms .Q.P90}}</td><td class="num">{{ms .Q.P99}}</td><td class="num">{{ms .Q.P999}}</td><td class="num">{{ms .Q.Max}}</td></tr>{{end}}
</table>{{end}}
</section>

<section id="files"><h2>Files</h2>
<ul>{{range .Files}}<li><a href="{{.}}">{{.}}</a></li>{{end}}
{{if .Lin}}<li><a href="{{.Lin}}">{{.Lin}}</a> (porcupine)</li>{{end}}</ul>
<h3>Node logs</h3>
{{if .Logs}}<ul class="logs">{{range .Logs}}<li><a href="{{.}}">{{.}}</a></li>{{end}}</ul>{{else}}<p>No node logs in this directory.</p>{{end}}
{{if .Scenario}}<details><summary>scenario.yaml</summary><pre>{{.Scenario}}</pre></details>{{end}}
</section>
</main></body></html>
`))

var reportCSS = reportPageCSS + svgCSS

const reportPageCSS = `
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#fff;border-bottom:1px solid #ddd;padding:12px 24px}
h1{font-size:20px;margin:4px 0}h2{font-size:16px;margin:24px 0 8px}h3{font-size:14px}
main{padding:0 24px 40px;max-width:1200px}
.sub{color:#666;margin:2px 0}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;vertical-align:middle;color:#fff}
.met{background:#2e7d32}.notmet{background:#c62828}.undecided{background:#ef8f00}.error{background:#6a1b9a}.skipped,.none{background:#9e9e9e}
table{border-collapse:collapse;background:#fff;margin:4px 0}
th,td{border:1px solid #e0e0e0;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
table.kv th{width:130px}
.reason{color:#c62828}
.note{background:#fff8e1;border:1px solid #ffe082;padding:6px 10px}
figure{margin:10px 0 18px;background:#fff;border:1px solid #e0e0e0;padding:6px}
figcaption{font-size:13px;color:#444;margin-bottom:4px}
.example{margin:2px 0 6px}
.op{font-size:12px}.op .t{color:#666;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,monospace;word-break:break-all}
pre{background:#fff;border:1px solid #e0e0e0;padding:8px;overflow:auto}
`
