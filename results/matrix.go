package results

import (
	"bytes"
	"html/template"
	"io/fs"
	"slices"
	"strings"
)

// WriteMatrixReport writes report.html into the matrix directory dir.
func WriteMatrixReport(dir string) error {
	return writeReport(dir, MatrixReport)
}

type matrixPage struct {
	Name      string
	Style     template.CSS
	Table     *Table
	Presets   []string
	Schedules []string
	Grid      [][][]gridCell // [preset][schedule] -> cells (one per seed)
	// GridGroups is [preset][schedule] -> its claims across seeds, if any.
	GridGroups  [][]*groupView
	Cells       []gridCell
	Counts      []statusCount
	Groups      []*groupView
	GroupCounts []statusCount
	Files       []string
}

// groupView is a group of claims across seeds, each seed linking to its
// cell's run report.
type groupView struct {
	Group
	Status string
	Anchor string
	Seeds  []groupSeedView
}

type groupSeedView struct {
	GroupSeed
	Report string
}

type gridCell struct {
	Cell
	Status string
	Report string // link to the cell's run report, relative to the matrix
	Log    string
	// Reproducer and ShrinkReport link what isrlab shrink found.
	Reproducer, ShrinkReport string
}

type statusCount struct {
	Status string
	N      int
}

// MatrixReport builds the report of the matrix directory matrix: the grid
// of presets x schedules coloured by outcome, each cell linking to its
// run's report, the groups of claims across seeds with each seed's
// outcome, and the table of every cell.
func MatrixReport(matrix fs.FS, name string) ([]byte, error) {
	t, err := ReadTable(matrix)
	if err != nil {
		return nil, err
	}
	d := matrixPage{Name: name, Style: template.CSS(reportCSS + matrixCSS), Table: t}
	for _, c := range t.Cells {
		if !slices.Contains(d.Presets, c.Preset) {
			d.Presets = append(d.Presets, c.Preset)
		}
		if !slices.Contains(d.Schedules, c.Schedule) {
			d.Schedules = append(d.Schedules, c.Schedule)
		}
	}
	d.Grid = make([][][]gridCell, len(d.Presets))
	for i := range d.Grid {
		d.Grid[i] = make([][]gridCell, len(d.Schedules))
	}
	counts := map[string]int{}
	for _, c := range t.Cells {
		g := gridCell{Cell: c, Status: c.Status()}
		if rel := t.RunRel(c); rel != "" {
			g.Report = rel + "/" + ReportFile
			if sh := c.Shrunk; sh != nil {
				g.Reproducer = rel + "/" + sh.Reproducer
				if sh.Report != "" {
					g.ShrinkReport = rel + "/" + sh.Report
				}
			}
		}
		logName := CellLogName(t.Matrix, c.Cell)
		if _, err := fs.Stat(matrix, logName); err == nil {
			g.Log = logName
		}
		counts[g.Status]++
		i, j := slices.Index(d.Presets, c.Preset), slices.Index(d.Schedules, c.Schedule)
		d.Grid[i][j] = append(d.Grid[i][j], g)
		d.Cells = append(d.Cells, g)
	}
	for _, s := range []string{Met, NotMet, Undecided, NotSetUp, "error", "skipped"} {
		if counts[s] > 0 {
			d.Counts = append(d.Counts, statusCount{s, counts[s]})
		}
	}
	d.GridGroups = make([][]*groupView, len(d.Presets))
	for i := range d.GridGroups {
		d.GridGroups[i] = make([]*groupView, len(d.Schedules))
	}
	reports := map[string]string{}
	for _, c := range d.Cells {
		reports[c.Cell.Cell] = c.Report
	}
	gcounts := map[string]int{}
	for _, g := range t.Groups {
		v := &groupView{Group: g, Status: g.Status(), Anchor: "across-" + strings.NewReplacer("/", "-", "+", "-").Replace(g.Group)}
		for _, sd := range g.Seeds {
			v.Seeds = append(v.Seeds, groupSeedView{GroupSeed: sd, Report: reports[sd.Cell]})
		}
		gcounts[v.Status]++
		d.Groups = append(d.Groups, v)
		if i, j := slices.Index(d.Presets, g.Preset), slices.Index(d.Schedules, g.Schedule); i >= 0 && j >= 0 {
			d.GridGroups[i][j] = v
		}
	}
	for _, s := range []string{Met, NotMet, Undecided} {
		if gcounts[s] > 0 {
			d.GroupCounts = append(d.GroupCounts, statusCount{s, gcounts[s]})
		}
	}
	d.Files = existing(matrix, TableFile, TableTextFile, JUnitFile)
	return renderPage(matrixTmpl, &d)
}

var matrixTmpl = template.Must(template.New("matrix").Funcs(funcs).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>isrlab matrix {{.Table.Matrix}}</title>
<style>{{.Style}}</style></head>
<body>
<header>
<h1>matrix {{.Table.Matrix}}</h1>
<p class="sub">{{.Name}} · started {{.Table.Started}} · {{f1 .Table.Seconds}}s · {{len .Table.Cells}} cells:
{{range .Counts}}<span class="badge {{status .Status}}">{{.N}} {{.Status}}</span> {{end}}
{{if .Groups}}· {{len .Groups}} across seeds:
{{range .GroupCounts}}<span class="badge {{status .Status}}">{{.N}} {{.Status}}</span> {{end}}{{end}}
{{with .Table.Shard}}· shard {{.}} (<code>isrlab matrix merge</code> joins the shards){{end}}
{{with .Table.Shards}}· merged from shards {{join . ", "}}{{end}}
{{with .Table.MissingShards}}· <span class="badge skipped">missing shards {{join . ", "}}: their cells did not run</span>{{end}}</p>
</header>
<main>
<section id="grid"><h2>Presets × schedules</h2>
<table class="grid"><tr><th>preset \ schedule</th>{{range .Schedules}}<th>{{.}}</th>{{end}}</tr>
{{range $i, $p := .Presets}}<tr><th>{{$p}}</th>{{range $j, $cells := index $.Grid $i}}<td>{{range $cells}}
<a class="cell {{status .Status}}" data-cell="{{.Cell.Cell}}" data-status="{{.Status}}" {{if .Report}}href="{{.Report}}"{{end}}>
<b>{{upper .Status}}</b>{{if .Seed}} · seed {{.Seed}}{{end}}<br>
{{if eq .State "done"}}valid {{.Valid}} · avail {{f3 .Avail}} · max unavail {{f1 .MaxUnavS}}s<br>{{anomtext .Anomalies}}{{else if .Error}}{{.Error}}{{end}}
{{with .Cell.Shrunk}}<br><i class="shrunk">shrunk: fails with {{.FailsWith}}{{if .Rate}}; {{.Rate}}{{end}}</i>{{end}}
</a>{{end}}{{with index (index $.GridGroups $i) $j}}
<a class="cell group {{status .Status}}" data-group="{{.Group.Group}}" data-status="{{.Status}}" href="#{{.Anchor}}">
<b>ACROSS SEEDS: {{upper .Status}}</b><br>{{.Expect}}</a>{{end}}</td>{{end}}</tr>
{{end}}</table>
</section>
{{if .Groups}}<section id="across-seeds"><h2>Across seeds</h2>
<p>Claims about what is possible, judged on the set of a preset × schedule's seeds; each seed's own outcome is its cell's.</p>
<table><tr><th>group</th><th>status</th><th>expect</th><th>seeds</th><th>why</th></tr>
{{range .Groups}}<tr id="{{.Anchor}}"><td>{{.Group.Group}}</td><td><span class="badge {{status .Status}}">{{.Status}}</span></td><td>{{.Expect}}</td>
<td>{{range .Seeds}}<div class="seed"><a class="badge {{status .Status}}" {{if .Report}}href="{{.Report}}"{{end}}>seed {{.Seed}}: {{.Status}}</a>
{{range .Facts}} {{.Name}} {{if .Value}}{{.Value}}{{else}}-{{end}} <span class="held-{{.Held}}">({{if eq .Held "yes"}}held{{else if eq .Held "no"}}did not hold{{else}}unknown{{end}})</span>{{end}}</div>{{end}}</td>
<td>{{range .Reasons}}<div>{{.}}</div>{{end}}</td></tr>
{{end}}</table>
</section>{{end}}
<section id="cells"><h2>Cells</h2>
<table><tr><th>cell</th><th>status</th><th>expect</th><th>valid</th><th>anomalies</th><th>availability</th><th>max unavailable</th><th>why</th><th>links</th></tr>
{{range .Cells}}<tr><td>{{.Cell.Cell}}</td><td><span class="badge {{status .Status}}">{{.Status}}</span></td><td>{{.Expect}}</td><td>{{.Valid}}</td><td>{{anomtext .Anomalies}}</td>
<td class="num">{{if eq .State "done"}}{{f3 .Avail}}{{end}}</td><td class="num">{{if eq .State "done"}}{{f1 .MaxUnavS}}s{{end}}</td>
<td>{{range .Reasons}}<div>{{.}}</div>{{end}}{{with .Error}}<div class="reason">{{.}}</div>{{end}}{{with .Cell.Shrunk}}<div class="shrunk">shrunk: fails with {{.FailsWith}}{{if .Rate}}; {{.Rate}}{{end}}</div>{{end}}</td>
<td>{{if .Report}}<a href="{{.Report}}">report</a>{{end}} {{if .Log}}<a href="{{.Log}}">log</a>{{end}}{{if .Reproducer}} <a class="reproducer" href="{{.Reproducer}}">reproducer</a>{{end}}{{if .ShrinkReport}} <a href="{{.ShrinkReport}}">shrink</a>{{end}}</td></tr>
{{end}}</table>
</section>
<section id="files"><h2>Files</h2><ul>{{range .Files}}<li><a href="{{.}}">{{.}}</a></li>{{end}}</ul></section>
</main></body></html>
`))

const matrixCSS = `
table.grid td{padding:4px;min-width:180px}
a.cell{display:block;color:#fff;text-decoration:none;padding:6px 8px;border-radius:4px;margin:2px 0;font-size:12px}
a.cell:hover{filter:brightness(1.1)}
a.cell.group{border:2px dashed #fff}
div.seed{margin:2px 0;font-size:12px}
.held-yes{font-weight:bold}.held-unknown{font-style:italic}
`

// existing returns the files of names that fsys has.
func existing(fsys fs.FS, names ...string) []string {
	var out []string
	for _, f := range names {
		if _, err := fs.Stat(fsys, f); err == nil {
			out = append(out, f)
		}
	}
	return out
}

// renderPage executes a page's template.
func renderPage(t *template.Template, d any) ([]byte, error) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
