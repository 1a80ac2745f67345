package results

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testStore lays out a results directory: a run (with latest pointing at
// it), a matrix, a secret file next to the directory, and symbolic links
// that lead out of it.
func testStore(t *testing.T) (root, secret string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "results")
	run := filepath.Join(root, "kill-leader-acks1", "20260101T000000Z-t1kill")
	copyDir(t, "testdata/run-kill", run)
	if err := LinkLatest(root, run); err != nil {
		t.Fatal(err)
	}
	m := filepath.Join(root, MatricesDir, "m", "20260102T000000Z-new1")
	copyDir(t, "testdata/matrix/new", m)
	secret = filepath.Join(base, "secret.txt")
	os.WriteFile(secret, []byte("TOP SECRET"), 0o644)
	os.Symlink(base, filepath.Join(root, "escape-dir"))
	os.Symlink(secret, filepath.Join(run, "escape-file"))
	os.Symlink("../../../secret.txt", filepath.Join(run, "escape-rel"))
	return root, secret
}

func get(t *testing.T, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	// Every answer, whatever it is, says what it is and forbids sniffing.
	if rec.Header().Get("Content-Type") == "" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("%s %s: Content-Type %q, X-Content-Type-Options %q", method, target,
			rec.Header().Get("Content-Type"), rec.Header().Get("X-Content-Type-Options"))
	}
	return rec
}

func newTestServer(t *testing.T, root string) *Server {
	t.Helper()
	s, err := NewServer(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestServeIndexAndReports(t *testing.T) {
	root, _ := testStore(t)
	s := newTestServer(t, root)
	rec := get(t, s, "GET", "/")
	body := rec.Body.String()
	if rec.Code != 200 || !strings.Contains(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("index: %d %v", rec.Code, rec.Header())
	}
	for _, want := range []string{
		`href="/files/kill-leader-acks1/20260101T000000Z-t1kill/report.html"`, // the run's report
		`href="/files/matrices/m/20260102T000000Z-new1/report.html"`,          // the matrix's
		`class="row row-met" data-status="met"`,
		"1 of 1 runs",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("index lacks %q", want)
		}
	}
	// Filters: by outcome and by scenario.
	if b := get(t, s, "GET", "/?outcome=not+met").Body.String(); !strings.Contains(b, "0 of 1 runs") {
		t.Error("outcome filter kept a met run")
	}
	if b := get(t, s, "GET", "/?scenario=KILL-leader").Body.String(); !strings.Contains(b, "1 of 1 runs") {
		t.Error("scenario filter (case-insensitive substring) dropped the run")
	}
	if b := get(t, s, "GET", "/?scenario=nothing").Body.String(); !strings.Contains(b, "0 of 1 runs") {
		t.Error("scenario filter kept a run of another scenario")
	}

	// The run's report.html is missing: it is built on demand and not
	// written.
	rep := get(t, s, "GET", "/files/kill-leader-acks1/20260101T000000Z-t1kill/report.html")
	if rep.Code != 200 || !strings.Contains(rep.Body.String(), `data-plot="throughput"`) {
		t.Fatalf("run report: %d %.200s", rep.Code, rep.Body.String())
	}
	if _, err := os.Stat(filepath.Join(root, "kill-leader-acks1", "20260101T000000Z-t1kill", ReportFile)); err == nil {
		t.Error("serve wrote report.html")
	}
	if !strings.Contains(rep.Header().Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("report CSP %q", rep.Header().Get("Content-Security-Policy"))
	}
	// Through the latest link, too (it stays inside the directory).
	if r := get(t, s, "GET", "/files/latest/report.html"); r.Code != 200 {
		t.Errorf("latest/report.html: %d", r.Code)
	}
	mrep := get(t, s, "GET", "/files/matrices/m/20260102T000000Z-new1/report.html")
	if mrep.Code != 200 || !strings.Contains(mrep.Body.String(), `data-cell="safe/leader-kill" data-status="not met"`) {
		t.Errorf("matrix report: %d %.300s", mrep.Code, mrep.Body.String())
	}
	// Files and listings.
	if r := get(t, s, "GET", "/files/latest/history.jsonl"); r.Code != 200 || !strings.HasPrefix(r.Header().Get("Content-Type"), "text/plain") ||
		!strings.Contains(r.Body.String(), `"isrlab_history":1`) {
		t.Errorf("history: %d %q", r.Code, r.Header().Get("Content-Type"))
	}
	if r := get(t, s, "GET", "/files/latest/linearizability.html"); r.Code != 200 || !strings.Contains(r.Header().Get("Content-Security-Policy"), "script-src 'unsafe-inline'") {
		t.Errorf("porcupine page: %d %v", r.Code, r.Header())
	}
	if r := get(t, s, "GET", "/files/latest"); r.Code != http.StatusMovedPermanently || r.Header().Get("Location") != "/files/latest/" {
		t.Errorf("directory without a slash: %d %v", r.Code, r.Header())
	}
	if r := get(t, s, "GET", "/files/latest/nodes/"); r.Code != 200 || !strings.Contains(r.Body.String(), `href="/files/latest/nodes/b1/"`) {
		t.Errorf("listing: %d %s", r.Code, r.Body.String())
	}
	if r := get(t, s, "HEAD", "/files/latest/verdict.json"); r.Code != 200 || r.Header().Get("Content-Type") != "application/json" {
		t.Errorf("HEAD verdict: %d %v", r.Code, r.Header())
	}
	if r := get(t, s, "POST", "/"); r.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", r.Code)
	}
	if r := get(t, s, "GET", "/elsewhere"); r.Code != http.StatusNotFound {
		t.Errorf("unknown path: %d", r.Code)
	}
	if r := get(t, s, "GET", "/files/no/such/file"); r.Code != http.StatusNotFound {
		t.Errorf("missing file: %d", r.Code)
	}
}

// TestServeRefusesEscapes: no path, however spelled, and no symbolic link
// leads out of the results directory.
func TestServeRefusesEscapes(t *testing.T) {
	root, _ := testStore(t)
	s := newTestServer(t, root)
	for _, tc := range []struct {
		target string
		code   int
	}{
		{"/files/../secret.txt", 400},
		{"/files/../../etc/passwd", 400},
		{"/files/latest/../../secret.txt", 400},
		{"/files/%2e%2e/secret.txt", 400},
		{"/files/%2E%2E/%2e%2e/etc/passwd", 400},
		{"/files/latest/%2e%2e/%2e%2e/secret.txt", 400},
		{"/files/..%2fsecret.txt", 400},
		{"/files/latest%2f..%2f..%2fsecret.txt", 400},
		{"/files/%2e%2e%2fsecret.txt", 400},
		{"/files/%252e%252e/secret.txt", 400},
		{"/files/..%5csecret.txt", 400},
		{"/files/./latest/history.jsonl", 400},
		{"/files/latest/%00", 400},
		{"/files/escape-dir/secret.txt", 403},
		{"/files/escape-dir/", 403},
		{"/files/latest/escape-file", 403},
		{"/files/latest/escape-rel", 403},
	} {
		r := get(t, s, "GET", tc.target)
		if r.Code != tc.code || strings.Contains(r.Body.String(), "TOP SECRET") || strings.Contains(r.Body.String(), "root:") {
			t.Errorf("GET %s: %d %q, want %d", tc.target, r.Code, r.Body.String(), tc.code)
		}
	}
	// The listing shows the links but following them is refused.
	if r := get(t, s, "GET", "/files/"); !strings.Contains(r.Body.String(), "escape-dir") {
		t.Error("listing hides the escaping link")
	}
}

// TestServeEscapesHostileNames: scenario names, directory names and record
// values are user data and come out escaped on every page.
func TestServeEscapesHostileNames(t *testing.T) {
	root := t.TempDir()
	hostile := `<script>alert(1)</script>"'><img src=x>`
	dir := filepath.Join(root, hostile, "20260101T000000Z-x")
	os.MkdirAll(dir, 0o755)
	writeHostileRun(t, dir, hostile)
	s := newTestServer(t, root)
	for _, target := range []string{"/", "/files/", "/files/" + urlSegment(hostile) + "/", "/files/" + urlSegment(hostile) + "/20260101T000000Z-x/report.html",
		"/?scenario=" + url.QueryEscape(hostile)} {
		r := get(t, s, "GET", target)
		b := r.Body.String()
		if r.Code != 200 {
			t.Errorf("GET %s: %d %s", target, r.Code, b)
			continue
		}
		if strings.Contains(b, "<script") || strings.Contains(b, "<img") {
			i := strings.Index(b, "<script")
			if i < 0 {
				i = strings.Index(b, "<img")
			}
			t.Errorf("GET %s: unescaped markup: %s", target, b[max(0, i-80):min(len(b), i+80)])
		}
		if !strings.Contains(b, "&lt;script&gt;") {
			t.Errorf("GET %s: the name is not shown (escaped)", target)
		}
	}
	// A stored .html other than isrlab's own is served as text.
	os.WriteFile(filepath.Join(root, "evil.html"), []byte(hostile), 0o644)
	if r := get(t, s, "GET", "/files/evil.html"); !strings.HasPrefix(r.Header().Get("Content-Type"), "text/plain") {
		t.Errorf("evil.html served as %q", r.Header().Get("Content-Type"))
	}
}

// urlSegment escapes s for a URL path, keeping its slashes (the hostile
// name is two directories).
func urlSegment(s string) string {
	segs := strings.Split(s, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return strings.Join(segs, "/")
}
