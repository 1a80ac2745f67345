package main

import (
	"bufio"
	"context"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/results"
)

const resultsTestdata = "../../results/testdata"

func copyTree(t *testing.T, src, dst string) {
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

func TestDiffExitCodes(t *testing.T) {
	old, cur := filepath.Join(resultsTestdata, "matrix", "old"), filepath.Join(resultsTestdata, "matrix", "new")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"diff", old, cur}, exitInvalid, "REGRESSION: 2 cell(s) fail that did not"},
		{[]string{"diff", old, filepath.Join(cur, "table.json")}, exitInvalid, "  safe/leader-kill: met -> not met"},
		{[]string{"diff", old, old}, exitValid, "no regression"},
		{[]string{"diff", "--json", old, cur}, exitInvalid, `"new_failures": [`},
		{[]string{"diff", filepath.Join(resultsTestdata, "run-kill"), filepath.Join(resultsTestdata, "run-kill")}, exitValid, "no regression"},
		{[]string{"diff", old}, exitBadArgs, "accepts 2 arg(s)"},
		{[]string{"diff", old, "/no/such/matrix"}, exitBadArgs, "no such file"},
		{[]string{"diff", old, resultsTestdata}, exitBadArgs, "not a matrix directory"},
		{[]string{"diff", "--availability-delta", "-1", old, cur}, exitBadArgs, "must not be negative"},
	} {
		code, out := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("isrlab %v: exit %d, want %d with %q:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
}

func TestReportCommand(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	copyTree(t, filepath.Join(resultsTestdata, "run-kill"), run)
	m := filepath.Join(t.TempDir(), "m")
	copyTree(t, filepath.Join(resultsTestdata, "matrix", "new"), m)
	lim := filepath.Join(t.TempDir(), "limits")
	copyTree(t, filepath.Join(resultsTestdata, "limits"), lim)
	out := filepath.Join(t.TempDir(), "elsewhere.html")
	for _, tc := range []struct {
		args []string
		code int
		file string
	}{
		{[]string{"report", run}, exitValid, filepath.Join(run, results.ReportFile)},
		{[]string{"report", m}, exitValid, filepath.Join(m, results.ReportFile)},
		{[]string{"report", lim}, exitValid, filepath.Join(lim, results.ReportFile)},
		{[]string{"report", run, "--out", out}, exitValid, out},
		{[]string{"report", t.TempDir()}, exitBadArgs, ""},
		{[]string{"report", filepath.Join(run, "history.jsonl")}, exitBadArgs, ""},
		{[]string{"report"}, exitBadArgs, ""},
	} {
		code, stdout := runCLI(t, tc.args...)
		if code != tc.code {
			t.Errorf("isrlab %v: exit %d, want %d:\n%s", tc.args, code, tc.code, stdout)
		}
		if tc.file != "" {
			b, err := os.ReadFile(tc.file)
			if err != nil || !strings.Contains(string(b), "<!DOCTYPE html>") {
				t.Errorf("isrlab %v: %s: %v", tc.args, tc.file, err)
			}
			if tc.file == filepath.Join(lim, results.ReportFile) && !strings.Contains(string(b), `data-plot="limits"`) {
				t.Errorf("isrlab %v: not a limit search's report", tc.args)
			}
		}
	}
}

// TestEveryCommandHasHelp: every command and subcommand answers --help.
func TestEveryCommandHasHelp(t *testing.T) {
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			p := append(append([]string(nil), path...), sub.Name())
			code, out := runCLI(t, append(p, "--help")...)
			if code != 0 || !strings.Contains(out, "Usage:") || !strings.Contains(out, "isrlab "+strings.Join(p, " ")) {
				t.Errorf("isrlab %s --help: exit %d:\n%s", strings.Join(p, " "), code, out)
			}
			walk(sub, p)
		}
	}
	walk(rootCmd, nil)
	for _, name := range []string{"report", "serve", "diff"} {
		if c, _, err := rootCmd.Find([]string{name}); err != nil || c.Name() != name || c.Long == "" {
			t.Errorf("no %s command with a long help", name)
		}
	}
}

// findChromium returns a headless-capable Chromium, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestServeInBrowser starts isrlab serve on loopback, loads the runs page
// in headless Chromium, follows the run's link, finds its plots in the DOM
// the browser built and takes a screenshot of it. ISRLAB_SCREENSHOT_DIR
// keeps the screenshot.
func TestServeInBrowser(t *testing.T) {
	chromium := findChromium()
	if chromium == "" {
		t.Skip("no chromium on PATH (Debian package chromium; scripts/deps.sh installs it): skipping the browser test")
	}
	root := filepath.Join(t.TempDir(), "results")
	runDir := filepath.Join(root, "kill-leader-acks1", "20260101T000000Z-t1kill")
	copyTree(t, filepath.Join(resultsTestdata, "run-kill"), runDir)
	if err := results.LinkLatest(root, runDir); err != nil {
		t.Fatal(err)
	}
	copyTree(t, filepath.Join(resultsTestdata, "matrix", "new"), filepath.Join(root, "matrices", "m", "20260102T000000Z-new1"))

	srv := exec.Command(proctest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--results", root)
	stdout, _ := srv.StdoutPipe()
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			srv.Process.Kill()
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
		done <- srv.Wait()
	}()
	var base string
	select {
	case l := <-lines:
		m := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("serve printed %q", l)
		}
		base = m[1]
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not print its address")
	}

	profile := t.TempDir()
	browse := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
			"--no-first-run", "--user-data-dir=" + profile}, args...)
		out, err := exec.CommandContext(ctx, chromium, args...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", args, err)
		}
		return string(out)
	}

	index := browse("--dump-dom", base+"/")
	link := regexp.MustCompile(`href="(/files/kill-leader-acks1/[^"]+/report\.html)"`).FindStringSubmatch(index)
	if link == nil || !strings.Contains(index, "isrlab results") {
		t.Fatalf("the runs page has no link to the run's report:\n%s", index)
	}
	page := browse("--dump-dom", base+link[1])
	for _, id := range []string{"faults", "throughput", "latency", "cluster", "unavailability", "unseen", "lag"} {
		if !regexp.MustCompile(`<svg[^>]*data-plot="` + id + `"`).MatchString(page) {
			t.Errorf("the browser's DOM of the run page has no %s plot", id)
		}
	}
	if !strings.Contains(page, `data-fault="kill" data-start="2.500" data-end="4.200"`) {
		t.Error("the run page's DOM has no shaded kill from 2.500 s to 4.200 s")
	}

	shot := filepath.Join(t.TempDir(), "run.png")
	if dir := os.Getenv("ISRLAB_SCREENSHOT_DIR"); dir != "" {
		shot = filepath.Join(dir, "run.png")
	}
	browse("--window-size=1280,2200", "--screenshot="+shot, base+link[1])
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	if b.Dx() != 1280 || b.Dy() != 2200 {
		t.Errorf("screenshot is %v", b)
	}
	// A rendered report is mostly light but not blank: count the pixels
	// that are neither white nor the page's background.
	colored := 0
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 < 235 || g>>8 < 235 || bl>>8 < 235 {
				colored++
			}
		}
	}
	if total := (b.Dx() / 4) * (b.Dy() / 4); colored < total/50 {
		t.Errorf("screenshot looks blank: %d of %d sampled pixels coloured", colored, total)
	}
	t.Logf("screenshot: %s (%d coloured samples)", shot, colored)
}
