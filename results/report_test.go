package results

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/history"
)

// elem is one element of a parsed page.
type elem struct {
	name  string
	attrs map[string]string
	text  string // the text directly inside it
}

// parseHTML walks a page with encoding/xml in its lenient HTML mode and
// returns every element, in document order.
func parseHTML(t *testing.T, page []byte) []*elem {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(page))
	d.Strict, d.AutoClose, d.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	var out, stack []*elem
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("parse page: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := &elem{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, e)
		case xml.EndElement:
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text += string(tok)
			}
		}
	}
}

// find returns the elements named name whose attributes include want.
func find(es []*elem, name string, want ...string) []*elem {
	var out []*elem
next:
	for _, e := range es {
		if e.name != name {
			continue
		}
		for i := 0; i+1 < len(want); i += 2 {
			if e.attrs[want[i]] != want[i+1] {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// plotElems returns the elements inside the SVG with data-plot=id.
func plotElems(t *testing.T, page []byte, id string) []*elem {
	t.Helper()
	i := bytes.Index(page, []byte(`data-plot="`+id+`"`))
	if i < 0 {
		t.Fatalf("no plot %q in the report", id)
	}
	start := bytes.LastIndex(page[:i], []byte("<svg"))
	end := bytes.Index(page[i:], []byte("</svg>"))
	return parseHTML(t, page[start:i+end+len("</svg>")])
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func runReport(t *testing.T, dir string) []byte {
	t.Helper()
	page, err := RunReport(os.DirFS(dir), filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	return page
}

// xOf is where a time falls on a report's shared axis.
func xOf(t1, sec float64) float64 { return newTimeAxis(t1).X(sec) }

func num(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return v
}

// TestRunReportPlots: every plot of the run report is there, on one time
// axis, and carries the run's own numbers (see testdata/README.md).
func TestRunReportPlots(t *testing.T) {
	page := runReport(t, "testdata/run-kill")
	all := parseHTML(t, page)
	for _, id := range []string{"faults", "throughput", "latency", "cluster", "unavailability", "unseen", "lag"} {
		svgs := find(all, "svg", "data-plot", id)
		if len(svgs) != 1 {
			t.Fatalf("plot %s: %d svg elements", id, len(svgs))
		}
		if len(find(all, "figure", "id", "plot-"+id)) != 1 {
			t.Errorf("plot %s has no figure", id)
		}
		// The history's last op is the drain's at 6.102 s.
		if got := svgs[0].attrs["data-t1"]; got != "6.102" {
			t.Errorf("plot %s: time axis ends at %s, want 6.102", id, got)
		}
	}
	const t1 = 6.102

	// The kill is shaded in every plot from its start's invocation to its
	// stop's completion, at the x of those times.
	for _, id := range []string{"throughput", "latency", "cluster", "unavailability", "unseen", "lag"} {
		rects := find(plotElems(t, page, id), "rect", "class", "fault")
		if len(rects) != 1 {
			t.Fatalf("plot %s: %d fault rects, want 1", id, len(rects))
		}
		r := rects[0].attrs
		if r["data-fault"] != "kill" || r["data-start"] != "2.500" || r["data-end"] != "4.200" {
			t.Errorf("plot %s: fault %v, want kill 2.500-4.200", id, r)
		}
		if x := num(t, r["x"]); math.Abs(x-xOf(t1, 2.5)) > 0.1 {
			t.Errorf("plot %s: fault starts at x=%v, want %v", id, x, xOf(t1, 2.5))
		}
		if w := num(t, r["width"]); math.Abs(w-(xOf(t1, 4.2)-xOf(t1, 2.5))) > 0.2 {
			t.Errorf("plot %s: fault width %v", id, w)
		}
	}
	bars := find(plotElems(t, page, "faults"), "rect", "class", "faultbar")
	if len(bars) != 1 || bars[0].attrs["data-label"] != "kill b1" {
		t.Errorf("fault lane: %v, want one bar labelled with the resolved node", bars)
	}

	// Throughput: totals per series.
	tp := plotElems(t, page, "throughput")
	for series, want := range map[string]string{"send-ok": "9", "send-fail": "1", "send-info": "1", "poll-ok": "4"} {
		ps := find(tp, "polyline", "data-series", series)
		if len(ps) != 1 || ps[0].attrs["data-total"] != want {
			t.Errorf("throughput %s: %v, want total %s", series, ps, want)
		}
	}
	if ps := find(tp, "polyline", "data-series", "poll-fail"); len(ps) != 0 {
		t.Errorf("a series with nothing in it is drawn: %v", ps)
	}

	// Latency: 9 ok sends, 4 ok polls; the fail and the info as points.
	lat := plotElems(t, page, "latency")
	if g := find(lat, "g", "data-series", "send"); len(g) != 1 || g[0].attrs["data-count"] != "9" {
		t.Errorf("latency send count: %v", g)
	}
	if g := find(lat, "g", "data-series", "poll"); len(g) != 1 || g[0].attrs["data-count"] != "4" {
		t.Errorf("latency poll count: %v", g)
	}
	if len(find(lat, "circle", "class", "point", "data-type", "fail")) != 1 || len(find(lat, "circle", "class", "point", "data-type", "info")) != 1 {
		t.Errorf("latency: want one fail and one info point")
	}

	// Cluster state: partition 0's leader b1 epoch 0, then b2 epoch 1 at
	// 2.600 s with b1 out of the ISR until 4.500 s.
	cl := plotElems(t, page, "cluster")
	leaders := find(cl, "rect", "class", "leader", "data-partition", "0")
	if len(leaders) != 3 {
		t.Fatalf("partition 0: %d leader segments, want 3", len(leaders))
	}
	for i, want := range [][3]string{{"1", "0", "0.010"}, {"2", "1", "2.600"}, {"2", "1", "4.500"}} {
		a := leaders[i].attrs
		if a["data-leader"] != want[0] || a["data-epoch"] != want[1] || a["data-start"] != want[2] {
			t.Errorf("leader segment %d: %v, want leader %s epoch %s from %s", i, a, want[0], want[1], want[2])
		}
	}
	var b1 []string
	for _, r := range find(cl, "rect", "class", "isr", "data-partition", "0", "data-replica", "1") {
		b1 = append(b1, r.attrs["data-start"])
	}
	if strings.Join(b1, " ") != "0.010 4.500" {
		t.Errorf("b1 in partition 0's ISR from %v, want 0.010 and 4.500 (out between)", b1)
	}

	// Unavailability: the checker's longest window on partition 0.
	un := find(plotElems(t, page, "unavailability"), "rect", "class", "unavail")
	if len(un) != 1 || un[0].attrs["data-partition"] != "0" || un[0].attrs["data-start"] != "2.900" ||
		un[0].attrs["data-end"] != "4.600" || un[0].attrs["data-longest"] != "1.700" {
		t.Errorf("unavailability: %v, want partition 0 2.900-4.600 (1.700 s)", un)
	}
	if x := num(t, un[0].attrs["x"]); math.Abs(x-xOf(t1, 2.9)) > 0.1 {
		t.Errorf("unavailability window at x=%v, want %v", x, xOf(t1, 2.9))
	}

	// Unseen: value 4 is never read; at most 4 acknowledged values were
	// waiting at once (values 1-5 before the poll at 2.4 s, less value 1 read at 1.2 s).
	us := find(plotElems(t, page, "unseen"), "polyline", "data-series", "unseen")
	if len(us) != 1 || us[0].attrs["data-final"] != "1" || us[0].attrs["data-max"] != "4" {
		t.Errorf("unseen: %v, want final 1, max 4", us)
	}
	// Lag: 8 acknowledged values were read afterwards.
	if g := find(plotElems(t, page, "lag"), "g", "data-series", "lag"); len(g) != 1 || g[0].attrs["data-count"] != "8" {
		t.Errorf("lag count: %v, want 8", g)
	}
}

// TestRunReportTables: the anomaly table with example operations and
// their times, the expectation and outcome, availability, and links to
// node logs and porcupine's visualization.
func TestRunReportTables(t *testing.T) {
	page := runReport(t, "testdata/run-kill")
	all := parseHTML(t, page)
	rows := find(all, "tr", "class", "anomaly")
	var kinds []string
	for _, r := range rows {
		kinds = append(kinds, r.attrs["data-anomaly"])
	}
	if strings.Join(kinds, ",") != "lost-write,inconsistent-offsets,nonmonotonic-send" {
		t.Errorf("anomaly rows %v", kinds)
	}
	s := string(page)
	for _, want := range []string{
		`value 4 acknowledged at offset 2 is missing from the complete final drain of partition 0`,
		`<span class="t">2.002s</span>`, // the acknowledgement of value 4
		`<td id="expect">lost-write &gt;0</td>`,
		`id="outcome">MET</span>`,
		`overall 85.71% (12/14), during faults 0.00% (0/2), after healing 100.00% (4/4) (1 faults)`,
		`longest 1.700s on partition 0`,
		`<a href="linearizability.html" id="porcupine">`,
		`<a href="nodes/b1/b1.log">`, `<a href="nodes/b2/b2.log">`,
		`<td>kill</td><td>kill b1</td><td>2.500s</td><td>4.200s</td>`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Self-contained: no scripts, nothing fetched from elsewhere.
	for _, bad := range []string{"<script", "http://", "https://", "src="} {
		if i := strings.Index(s, bad); i >= 0 && !(bad == "http://" && strings.Contains(s[i:i+40], "www.w3.org/2000/svg")) {
			t.Errorf("report contains %q: %s", bad, s[max(0, i-40):min(len(s), i+60)])
		}
	}
}

// TestRunReportWithoutVerdict: a run cut short before its check still gets
// a report; the history is checked in memory.
func TestRunReportWithoutVerdict(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, "testdata/run-kill", dir)
	os.Remove(filepath.Join(dir, VerdictFile))
	os.Remove(filepath.Join(dir, OutcomeFile))
	page := runReport(t, dir)
	for _, want := range []string{"no verdict.json", "NO OUTCOME", `data-plot="unseen"`, "lost-write=1"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, VerdictFile)); err == nil {
		t.Error("the report wrote verdict.json")
	}
}

// TestRunReportEscapes: scenario names, fault values, node names and
// record errors are user data; none of them can add markup to the report.
func TestRunReportEscapes(t *testing.T) {
	dir := t.TempDir()
	hostile := `<script>alert(1)</script><img src=x onerror=alert(2)>"'`
	writeHostileRun(t, dir, hostile)
	page := runReport(t, dir)
	s := string(page)
	for _, bad := range []string{"<script", "<img", `"'`} {
		if strings.Contains(s, bad) {
			i := strings.Index(s, bad)
			t.Errorf("report contains %q unescaped: %s", bad, s[max(0, i-80):min(len(s), i+80)])
		}
	}
	if !strings.Contains(s, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the hostile scenario name is not shown escaped")
	}
	parseHTML(t, page)
}

// writeHostileRun writes a small run whose scenario name, fault value,
// node name and errors are name.
func writeHostileRun(t *testing.T, dir, name string) {
	t.Helper()
	var buf bytes.Buffer
	w, err := history.NewWriter(&buf, history.Header{Run: name, Topic: name, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	val, _ := json.Marshal(map[string]any{"kind": name, "nodes": []string{name}, "resolved": []string{name}})
	ops := []history.Op{
		{Process: history.Nemesis, Type: history.Invoke, F: "start-" + name, RawValue: val, Time: 1e8},
		{Process: history.Cluster, Type: history.Info, F: history.FState, Partition: 0, Leader: 1, Epoch: 0, ISR: []int32{1}, Time: 2e8},
		{Process: 0, Type: history.Invoke, F: history.FSend, Value: 1, HasValue: true, Partition: 0, Time: 3e8},
		{Process: 0, Type: history.OK, F: history.FSend, Value: 1, HasValue: true, Partition: 0, Offset: 0, Node: name, Time: 4e8},
		{Process: 0, Type: history.Invoke, F: history.FSend, Value: 2, HasValue: true, Partition: 0, Time: 5e8},
		{Process: 0, Type: history.Fail, F: history.FSend, Value: 2, HasValue: true, Partition: 0, Error: name, Time: 6e8},
		{Process: history.Nemesis, Type: history.OK, F: "stop-" + name, RawValue: val, Time: 7e8},
	}
	for i := range ops {
		op := history.NewOp(ops[i].Process, ops[i].Type, ops[i].F)
		op.Index, op.Time, op.RawValue, op.Node, op.Error = int64(i), ops[i].Time, ops[i].RawValue, ops[i].Node, ops[i].Error
		op.Value, op.HasValue = ops[i].Value, ops[i].HasValue
		if op.F == history.FSend || op.F == history.FState {
			op.Partition = 0
		}
		if op.F == history.FState {
			op.Leader, op.Epoch, op.ISR = 1, 0, []int32{1}
		}
		if op.F == history.FSend && op.Type == history.OK {
			op.Offset = 0
		}
		if err := w.Write(&op); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	if err := os.WriteFile(filepath.Join(dir, HistoryFile), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(Outcome{Scenario: name, RunID: name, Outcome: NotMet, Expect: name, Reasons: []string{name},
		Anomalies: map[string]int64{name: 1}})
	os.WriteFile(filepath.Join(dir, OutcomeFile), out, 0o644)
	os.WriteFile(filepath.Join(dir, ScenarioFile), []byte("name: "+name+"\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, NodesDir, "b1"), 0o755)
	os.WriteFile(filepath.Join(dir, NodesDir, "b1", "b1.log"), []byte(name), 0o644)
}

// TestPlotsAreXML: every plot of the run report, and the limit search's
// plot, is well-formed XML on its own (strict mode), as an .svg file
// must be.
func TestPlotsAreXML(t *testing.T) {
	page := runReport(t, "testdata/run-kill")
	var svgs []string
	for rest := string(page); ; {
		i := strings.Index(rest, "<svg")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], "</svg>")
		svgs = append(svgs, rest[i:i+j+len("</svg>")])
		rest = rest[i+j:]
	}
	if len(svgs) < 7 {
		t.Fatalf("%d plots in the report, want 7", len(svgs))
	}
	l, err := ReadLimits(os.DirFS("testdata/limits"))
	if err != nil {
		t.Fatal(err)
	}
	svgs = append(svgs, string(LimitsPlot(l)))
	for _, s := range svgs {
		d := xml.NewDecoder(strings.NewReader(s))
		for {
			_, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("not well-formed: %v\n%.300s", err, s)
			}
		}
	}
}
