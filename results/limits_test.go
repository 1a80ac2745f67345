package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLimitsReport: the limit search's page (testdata/limits, see
// testdata/README.md) has the boundary table with the planning figure, the
// boundary plot with a marker per record size (hollow for a lower bound),
// and every point's signals and verdict, linking to the point run's
// report where there is one; it is self-contained.
func TestLimitsReport(t *testing.T) {
	fsys := os.DirFS("testdata/limits")
	if !IsLimits(fsys, ".") || IsLimits(os.DirFS("testdata/run-kill"), ".") {
		t.Fatal("IsLimits")
	}
	page, err := LimitsReport(fsys, "limits-fixture")
	if err != nil {
		t.Fatal(err)
	}
	all := parseHTML(t, page)
	if len(find(all, "span", "id", "incomplete")) != 1 {
		t.Error("no INCOMPLETE badge")
	}
	cells := func(e []*elem, name string) []string {
		var out []string
		for _, c := range e {
			if c.name == name {
				out = append(out, strings.TrimSpace(c.text))
			}
		}
		return out
	}
	// The boundary table: record B, safe, overloads at, points, limit and
	// plan per broker.
	rows := map[string]string{"100": "100 11 12 5 3667 0.37 2933 0.29", "10000": "10000 8 16 (open) 2 2667 26.67 2133 21.33"}
	for size, want := range rows {
		tr := find(all, "tr", "class", "limit", "data-size", size)
		if len(tr) != 1 {
			t.Fatalf("boundary row %s: %d", size, len(tr))
		}
		got := strings.Join(cells(rowOf(all, tr[0]), "td"), " ")
		if got != want {
			t.Errorf("boundary row %s: %q, want %q", size, got, want)
		}
	}
	// The plot: one marker per search, at its limit and plan, in both
	// panels; the open search's is hollow.
	plot := plotElems(t, page, "limits")
	for _, c := range []struct{ size, msgs, mbs, fill string }{{"100", "3666.67", "0.366667", "#c62828"}, {"10000", "2666.67", "26.6667", "#fff"}} {
		circles := find(plot, "circle", "data-size", c.size)
		if len(circles) != 2 {
			t.Fatalf("plot: %d markers for %s B", len(circles), c.size)
		}
		if circles[0].attrs["data-limit"] != c.msgs || circles[1].attrs["data-limit"] != c.mbs || circles[0].attrs["fill"] != c.fill {
			t.Errorf("%s B markers: %v %v", c.size, circles[0].attrs, circles[1].attrs)
		}
		if p := num(t, circles[1].attrs["data-plan"]); p < 0.8*num(t, c.mbs)-1e-3 || p > 0.8*num(t, c.mbs)+1e-3 {
			t.Errorf("%s B plan %v, want 0.8 x %s", c.size, p, c.mbs)
		}
	}
	for _, id := range []string{"limit", "plan"} {
		if n := len(find(plot, "polyline", "data-series", id)); n != 2 {
			t.Errorf("%s lines: %d, want one per panel", id, n)
		}
	}
	// The points, in the order probed, with their signals and verdicts.
	pts := find(all, "tr", "data-producers", "12")
	if len(pts) != 1 || pts[0].attrs["class"] != "point overload" {
		t.Fatalf("12-producer point: %v", pts)
	}
	got := strings.Join(cells(rowOf(all, pts[0]), "td"), "|")
	for _, want := range []string{"3|12|12000|11900|1.19|30% (min 25%)|10% of 10|612ms|"} {
		if !strings.HasPrefix(got, want) {
			t.Errorf("12-producer row %q, want it to start %q", got, want)
		}
	}
	if !bytes.Contains(page, []byte("produce p99 612 ms &gt; 500 ms")) {
		t.Error("the overload's reason is not shown")
	}
	// p99 0 (nothing acked in time) and the missing idle metric read n/a.
	first := strings.Join(cells(rowOf(all, find(all, "tr", "data-producers", "16")[0]), "td"), "|")
	if !strings.Contains(first, "|10% (min 5%)|60% of 10|n/a|") {
		t.Errorf("16-producer row %q", first)
	}
	last := find(all, "tr", "data-producers", "8")
	if len(last) != 2 || !strings.Contains(strings.Join(cells(rowOf(all, last[1]), "td"), "|"), "|n/a|0% of 10|60ms|") {
		t.Errorf("10000 B, 8 producers: %v", last)
	}
	// Only the point whose run directory is there links to its report.
	links := find(all, "a", "href", "points/limits/size-100/producers-11/20261201T000000Z-aaaa1111/report.html")
	if len(links) != 1 || bytes.Count(page, []byte(">report</a>")) != 1 {
		t.Errorf("point report links: %d", bytes.Count(page, []byte(">report</a>")))
	}
	for _, want := range []string{`id="payload">random<`, "limit × 0.80 (tolerates 20% of the brokers offline)", "produce p99 &gt; 500 ms"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", "src=", "<link"} {
		if bytes.Contains(page, []byte(bad)) {
			t.Errorf("page is not self-contained: %s", bad)
		}
	}
}

// rowOf returns the elements of the table row tr (up to the next row).
func rowOf(all []*elem, tr *elem) []*elem {
	for i, e := range all {
		if e == tr {
			j := i + 1
			for j < len(all) && all[j].name != "tr" {
				j++
			}
			return all[i+1 : j]
		}
	}
	return nil
}

// TestWriteLimitsReport: the page lands in the directory, and limits.svg
// stands alone (its own style, a white background).
func TestWriteLimitsReport(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/limits/limits.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, LimitsFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := ReadLimits(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	svg := string(LimitsPlot(l))
	if !strings.HasPrefix(svg, `<svg xmlns="http://www.w3.org/2000/svg"`) || !strings.Contains(svg, "<style>") || !strings.Contains(svg, "MB/s per broker") {
		t.Errorf("svg: %.300s", svg)
	}
	if err := WriteLimitsReport(dir); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil || !bytes.Contains(page, []byte(`data-plot="limits"`)) {
		t.Errorf("report.html: %v", err)
	}
}
