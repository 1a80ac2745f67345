package results

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"time"
)

// Server is the web UI over a results directory: a table of runs and
// matrices, their reports (built on demand when report.html is missing),
// and a file browser. It only reads. Every path is resolved inside the
// results directory through an os.Root, so neither "..", encoded or not,
// nor a symbolic link can lead out of it.
type Server struct {
	root *os.Root
	dir  string
}

// NewServer serves the results directory dir.
func NewServer(dir string) (*Server, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open results directory: %w", err)
	}
	return &Server{root: r, dir: dir}, nil
}

// Close releases the results directory.
func (s *Server) Close() error { return s.root.Close() }

// Content security policies: our pages have no scripts; porcupine's
// visualization is one page of inline script and nothing else.
const (
	cspPage = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
	cspLin  = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

// ServeHTTP answers GET and HEAD on "/" (the runs), "/files/..." (the
// browser, files and reports).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Security-Policy", cspPage)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch {
	case r.URL.Path == "/":
		s.index(w, r)
	case r.URL.Path == "/files" || strings.HasPrefix(r.URL.Path, "/files/"):
		rel, err := relPath(r, "/files")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.file(w, r, rel)
	default:
		http.Error(w, "not found", http.StatusNotFound)
	}
}

// errBadPath is a request path that could name something outside the
// results directory, or is not what a results path looks like.
var errBadPath = errors.New("bad path: no '.' or '..' segments, encoded slashes, backslashes or NUL")

// relPath returns the request's path after prefix as a slash-separated
// path relative to the results directory ("." for the top). Dot segments
// are refused, not resolved, in the decoded and the raw path; so are
// encoded slashes and backslashes (which would make one segment two) and
// percent signs left after decoding (double encoding).
func relPath(r *http.Request, prefix string) (string, error) {
	raw := strings.ToLower(r.URL.EscapedPath())
	for _, bad := range []string{"%2f", "%5c", "%00", "%25"} {
		if strings.Contains(raw, bad) {
			return "", errBadPath
		}
	}
	p := strings.TrimPrefix(r.URL.Path, prefix)
	if strings.ContainsAny(p, "\\\x00%") {
		return "", errBadPath
	}
	var segs []string
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "":
			continue
		case ".", "..":
			return "", errBadPath
		}
		segs = append(segs, seg)
	}
	for _, seg := range strings.Split(r.URL.RawPath, "/") {
		if seg == "." || seg == ".." {
			return "", errBadPath
		}
	}
	if len(segs) == 0 {
		return ".", nil
	}
	return strings.Join(segs, "/"), nil
}

// fileURL is the browser's URL of rel, each segment escaped.
func fileURL(rel string) string {
	if rel == "." || rel == "" {
		return "/files/"
	}
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/files/" + strings.Join(segs, "/")
}

// openErr answers an error from the root: missing is 404; anything else
// (a path that escapes through a symbolic link, a permission) is 403.
func openErr(w http.ResponseWriter, err error) {
	if errors.Is(err, fs.ErrNotExist) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	http.Error(w, "forbidden: outside the results directory or not readable", http.StatusForbidden)
}

func (s *Server) file(w http.ResponseWriter, r *http.Request, rel string) {
	f, err := s.root.Open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && path.Base(rel) == ReportFile {
			s.report(w, r, path.Dir(rel))
			return
		}
		openErr(w, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		openErr(w, err)
		return
	}
	if st.IsDir() {
		if !strings.HasSuffix(r.URL.Path, "/") {
			http.Redirect(w, r, fileURL(rel)+"/", http.StatusMovedPermanently)
			return
		}
		s.listing(w, r, rel)
		return
	}
	if !st.Mode().IsRegular() {
		http.Error(w, "forbidden: not a regular file", http.StatusForbidden)
		return
	}
	ct, csp := contentType(path.Base(rel))
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Security-Policy", csp)
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// contentType is the type a file is served as. HTML is served as HTML
// only for the files isrlab writes; anything else that could run script
// (HTML, SVG) is served as text.
func contentType(name string) (ct, csp string) {
	switch name {
	case ReportFile:
		return "text/html; charset=utf-8", cspPage
	case LinearizabilityFile:
		return "text/html; charset=utf-8", cspLin
	}
	switch path.Ext(name) {
	case ".json":
		return "application/json", cspPage
	case ".xml":
		return "application/xml", cspPage
	case ".png":
		return "image/png", cspPage
	case ".log", ".jsonl", ".yaml", ".yml", ".txt", ".properties", ".html", ".svg", ".md", "":
		return "text/plain; charset=utf-8", cspPage
	}
	return "application/octet-stream", cspPage
}

// report builds the report of the run or matrix directory rel, whose
// report.html is missing, and answers it without writing it: the UI only
// reads.
func (s *Server) report(w http.ResponseWriter, r *http.Request, rel string) {
	sub, err := fs.Sub(s.root.FS(), rel)
	if err != nil {
		http.Error(w, "bad path", http.StatusBadRequest)
		return
	}
	var b []byte
	switch {
	case IsMatrix(sub, "."):
		b, err = MatrixReport(sub, path.Base(rel))
	case IsRun(sub, "."):
		b, err = RunReport(sub, path.Base(rel))
	default:
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, "report: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
}

type listEntry struct {
	Name, URL, Size, Mod string
	Dir, Link            bool
}

type listPage struct {
	Style   template.CSS
	Rel     string
	Crumbs  []crumb
	Entries []listEntry
	Report  string
	Kind    string
}

type crumb struct{ Name, URL string }

func (s *Server) listing(w http.ResponseWriter, r *http.Request, rel string) {
	ents, err := fs.ReadDir(s.root.FS(), rel)
	if err != nil {
		openErr(w, err)
		return
	}
	d := listPage{Style: template.CSS(reportCSS + uiCSS), Rel: rel}
	d.Crumbs = append(d.Crumbs, crumb{"results", "/files/"})
	if rel != "." {
		segs := strings.Split(rel, "/")
		for i := range segs {
			d.Crumbs = append(d.Crumbs, crumb{segs[i], fileURL(strings.Join(segs[:i+1], "/")) + "/"})
		}
	}
	sub, _ := fs.Sub(s.root.FS(), rel)
	if sub != nil {
		switch {
		case IsMatrix(sub, "."):
			d.Kind, d.Report = "matrix", fileURL(path.Join(rel, ReportFile))
		case IsRun(sub, "."):
			d.Kind, d.Report = "run", fileURL(path.Join(rel, ReportFile))
		}
	}
	for _, e := range ents {
		le := listEntry{Name: e.Name(), URL: fileURL(path.Join(rel, e.Name())), Dir: e.IsDir(), Link: e.Type()&fs.ModeSymlink != 0}
		if le.Dir || le.Link {
			le.URL += "/"
		}
		if info, err := e.Info(); err == nil {
			le.Mod = info.ModTime().UTC().Format("2006-01-02 15:04:05")
			if info.Mode().IsRegular() {
				le.Size = byteSize(info.Size())
			}
		}
		d.Entries = append(d.Entries, le)
	}
	render(w, listTmpl, &d)
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func render(w http.ResponseWriter, t *template.Template, data any) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

// Entry is one run or matrix of the results directory.
type Entry struct {
	Kind    string // "run" or "matrix"
	Rel     string // its directory, relative to the results directory
	Name    string // the scenario or matrix
	Started string
	Status  string // an outcome, or "" when the run has none yet
	Detail  string
	Matrix  string // for a matrix cell: the matrix's directory
	Counts  []statusCount
	sortKey string
}

// URL is the entry's report in the browser.
func (e Entry) URL() string { return fileURL(path.Join(e.Rel, ReportFile)) }

// MatrixURL is the report of the matrix a cell's run belongs to.
func (e Entry) MatrixURL() string { return fileURL(path.Join(e.Matrix, ReportFile)) }

// DirURL is the entry's directory in the browser.
func (e Entry) DirURL() string { return fileURL(e.Rel) + "/" }

// Scan lists the runs and matrices under the results directory, newest
// first. It does not follow symbolic links (results/latest is one) and
// does not descend into node directories.
func Scan(fsys fs.FS) (runs, matrices []Entry) {
	var matrixDirs []string
	fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == NodesDir || d.Name() == LogsDir || strings.Count(p, "/") > 16) {
			return fs.SkipDir
		}
		if IsMatrix(fsys, p) {
			matrixDirs = append(matrixDirs, p)
			matrices = append(matrices, matrixEntry(fsys, p))
			return nil
		}
		if IsRun(fsys, p) {
			e := runEntry(fsys, p)
			for _, m := range matrixDirs {
				if strings.HasPrefix(p, m+"/") {
					e.Matrix = m
				}
			}
			runs = append(runs, e)
			return fs.SkipDir
		}
		return nil
	})
	newest := func(es []Entry) {
		sort.SliceStable(es, func(i, j int) bool { return es[i].sortKey > es[j].sortKey })
	}
	newest(runs)
	newest(matrices)
	return runs, matrices
}

// stamp is the start time in a directory name "<stamp>-<id>", or the
// directory's own name.
func stamp(dir string) string {
	base := path.Base(dir)
	if len(base) >= len(StampFormat) {
		if t, err := time.Parse(StampFormat, base[:len(StampFormat)]); err == nil {
			return t.UTC().Format(time.RFC3339)
		}
	}
	return ""
}

func runEntry(fsys fs.FS, dir string) Entry {
	sub, _ := fs.Sub(fsys, dir)
	e := Entry{Kind: "run", Rel: dir, Name: path.Dir(dir), Started: stamp(dir)}
	if o, err := ReadOutcome(sub); err == nil {
		e.Name, e.Status = o.Scenario, o.Outcome
		if o.Started != "" {
			e.Started = o.Started
		}
		e.Detail = fmt.Sprintf("valid %s; anomalies: %s", o.Valid, anomalyText(o.Anomalies))
		if o.Incomplete {
			e.Detail += "; incomplete"
		}
		if len(o.Reasons) > 0 {
			e.Detail += "; " + strings.Join(o.Reasons, "; ")
		}
	} else if errors.Is(err, fs.ErrNotExist) {
		e.Detail = "no outcome.json: running, or stopped before its check"
	} else {
		e.Detail = "unreadable outcome.json: " + err.Error()
	}
	e.sortKey = e.Started + "\x00" + dir
	return e
}

func matrixEntry(fsys fs.FS, dir string) Entry {
	sub, _ := fs.Sub(fsys, dir)
	e := Entry{Kind: "matrix", Rel: dir, Name: path.Base(path.Dir(dir)), Started: stamp(dir)}
	t, err := ReadTable(sub)
	if err != nil {
		e.Detail = "unreadable table.json: " + err.Error()
		e.sortKey = e.Started + "\x00" + dir
		return e
	}
	e.Name = t.Matrix
	if t.Started != "" {
		e.Started = t.Started
	}
	counts := map[string]int{}
	worst := Met
	for _, c := range t.Cells {
		st := c.Status()
		counts[st]++
		if rank(st) > rank(worst) {
			worst = st
		}
	}
	// A group across seeds colours the matrix like a cell; the counts
	// stay the cells'.
	for _, g := range t.Groups {
		if st := g.Status(); rank(st) > rank(worst) {
			worst = st
		}
	}
	e.Status = worst
	for _, st := range []string{Met, NotMet, Undecided, NotSetUp, "error", "skipped"} {
		if counts[st] > 0 {
			e.Counts = append(e.Counts, statusCount{st, counts[st]})
		}
	}
	e.Detail = fmt.Sprintf("%d cells", len(t.Cells))
	if n := len(t.Groups); n > 0 {
		e.Detail += fmt.Sprintf(", %d across seeds", n)
	}
	e.sortKey = e.Started + "\x00" + dir
	return e
}

// rank orders statuses from good to bad, for a matrix's colour.
func rank(status string) int {
	return slices.Index([]string{Met, "skipped", Undecided, NotSetUp, NotMet, "error"}, status)
}

type indexPage struct {
	Style     template.CSS
	Dir       string
	Runs      []Entry
	Matrices  []Entry
	Total     int
	Scenario  string
	Outcome   string
	Scenarios []string
	Outcomes  []string
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	runs, matrices := Scan(s.root.FS())
	q := r.URL.Query()
	d := indexPage{Style: template.CSS(reportCSS + uiCSS), Dir: s.dir, Matrices: matrices, Total: len(runs),
		Scenario: q.Get("scenario"), Outcome: q.Get("outcome"),
		Outcomes: []string{Met, NotMet, Undecided, NotSetUp, "none"}}
	seen := map[string]bool{}
	for _, e := range runs {
		if !seen[e.Name] {
			seen[e.Name] = true
			d.Scenarios = append(d.Scenarios, e.Name)
		}
	}
	sort.Strings(d.Scenarios)
	want := strings.ToLower(d.Scenario)
	for _, e := range runs {
		if want != "" && !strings.Contains(strings.ToLower(e.Name), want) {
			continue
		}
		if d.Outcome != "" && !(e.Status == d.Outcome || d.Outcome == "none" && e.Status == "") {
			continue
		}
		d.Runs = append(d.Runs, e)
	}
	render(w, indexTmpl, &d)
}

var uiFuncs = template.FuncMap{"status": statusClass, "upper": strings.ToUpper,
	"orNone": func(s string) string {
		if s == "" {
			return "none"
		}
		return s
	}}

var indexTmpl = template.Must(template.New("index").Funcs(uiFuncs).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>isrlab results</title><style>{{.Style}}</style></head>
<body><header><h1>isrlab results</h1><p class="sub">{{.Dir}} · <a href="/files/">browse files</a></p></header>
<main>
<section id="matrices"><h2>Matrices</h2>
{{if .Matrices}}<table><tr><th>matrix</th><th>started</th><th>cells</th><th>directory</th></tr>
{{range .Matrices}}<tr class="row row-{{status .Status}}"><td><a class="report" href="{{.URL}}">{{.Name}}</a></td><td>{{.Started}}</td>
<td>{{range .Counts}}<span class="badge {{status .Status}}">{{.N}} {{.Status}}</span> {{end}}{{.Detail}}</td><td><a href="{{.DirURL}}">{{.Rel}}</a></td></tr>
{{end}}</table>{{else}}<p>No matrices.</p>{{end}}
</section>
<section id="runs"><h2>Runs</h2>
<form method="get" action="/" class="filter">
<label>scenario <input name="scenario" list="scenarios" value="{{.Scenario}}"></label>
<datalist id="scenarios">{{range .Scenarios}}<option value="{{.}}">{{end}}</datalist>
<label>outcome <select name="outcome"><option value="">any</option>
{{range .Outcomes}}<option value="{{.}}"{{if eq . $.Outcome}} selected{{end}}>{{.}}</option>{{end}}</select></label>
<button type="submit">filter</button> <a href="/">clear</a> · {{len .Runs}} of {{.Total}} runs
</form>
<table id="runs-table"><tr><th>outcome</th><th>scenario</th><th>started</th><th>verdict</th><th>matrix</th><th>directory</th></tr>
{{range .Runs}}<tr class="row row-{{status .Status}}" data-status="{{orNone .Status}}"><td><span class="badge {{status .Status}}">{{upper (orNone .Status)}}</span></td>
<td><a class="report" href="{{.URL}}">{{.Name}}</a></td><td>{{.Started}}</td><td>{{.Detail}}</td>
<td>{{if .Matrix}}<a href="{{.MatrixURL}}">{{.Matrix}}</a>{{end}}</td><td><a href="{{.DirURL}}">{{.Rel}}</a></td></tr>
{{end}}</table>
</section>
</main></body></html>
`))

var listTmpl = template.Must(template.New("list").Funcs(uiFuncs).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>isrlab results: {{.Rel}}</title><style>{{.Style}}</style></head>
<body><header><h1>{{range $i, $c := .Crumbs}}{{if $i}} / {{end}}<a href="{{$c.URL}}">{{$c.Name}}</a>{{end}}</h1>
<p class="sub"><a href="/">all runs</a>{{if .Report}} · <a id="report" href="{{.Report}}">this {{.Kind}}'s report</a>{{end}}</p></header>
<main><table class="files"><tr><th>name</th><th>size</th><th>modified (UTC)</th></tr>
{{range .Entries}}<tr><td><a href="{{.URL}}">{{.Name}}{{if .Dir}}/{{end}}</a>{{if .Link}} → (link){{end}}</td><td class="num">{{.Size}}</td><td>{{.Mod}}</td></tr>
{{end}}</table></main></body></html>
`))

const uiCSS = `
tr.row-met td:first-child{border-left:5px solid #2e7d32}
tr.row-notmet td:first-child{border-left:5px solid #c62828}
tr.row-undecided td:first-child{border-left:5px solid #ef8f00}
tr.row-error td:first-child{border-left:5px solid #6a1b9a}
tr.row-none td:first-child,tr.row-skipped td:first-child{border-left:5px solid #9e9e9e}
tr.row-notmet,tr.row-error{background:#fff1f1}tr.row-undecided{background:#fff8ec}
form.filter{margin:6px 0 10px}form.filter label{margin-right:12px}
table.files td{padding:2px 10px}
`
