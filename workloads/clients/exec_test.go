package clients

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/workloads"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("ISRLAB_TEST_DRIVER"); mode != "" {
		brokenDriver(mode)
		os.Exit(0)
	}
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

// brokenDriver is an exec driver that goes wrong the way mode says, at
// the first send: it answers the hello and opens, and polls with nothing.
func brokenDriver(mode string) {
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	in.Scan() // the hello
	if strings.HasPrefix(mode, "leak") {
		leakyDriver(mode, in.Bytes(), in, out)
		return
	}
	switch mode {
	case "refuse":
		out.Encode(map[string]any{"type": "refused", "error": "this client has no idempotent producer"})
		return
	case "bad-hello":
		fmt.Println("HELLO")
		select {}
	case "silent":
		select {}
	case "close-input":
		// Its input closed at once, so the lab's next write breaks the
		// pipe before the driver's exit is read.
		out.Encode(map[string]any{"type": "hello", "client": "broken " + mode, "pid": os.Getpid()})
		os.Stdin.Close()
		time.Sleep(300 * time.Millisecond)
		fmt.Fprintln(os.Stderr, "broken driver: closed its input")
		os.Exit(5)
	}
	// Its hello names no feature: a driver older than the txn feature.
	out.Encode(map[string]any{"type": "hello", "client": "broken " + mode, "pid": os.Getpid()})
	for in.Scan() {
		var op struct {
			ID      int64  `json:"id"`
			Process int    `json:"process"`
			F       string `json:"f"`
		}
		json.Unmarshal(in.Bytes(), &op)
		if op.F != "send" {
			out.Encode(map[string]any{"id": op.ID, "process": op.Process, "type": "ok"})
			continue
		}
		switch mode {
		case "crash":
			fmt.Fprintln(os.Stderr, "broken driver: boom")
			os.Exit(3)
		case "garbage":
			fmt.Println("Traceback (most recent call last):")
		case "hang":
			select {}
		case "wrong-id":
			out.Encode(map[string]any{"id": op.ID + 1000, "process": op.Process, "type": "ok"})
		case "wrong-type":
			out.Encode(map[string]any{"id": op.ID, "process": op.Process, "type": "maybe"})
		case "exit":
			os.Exit(0)
		}
	}
}

// brokenClient returns an exec client running brokenDriver in mode.
func brokenClient(t *testing.T, mode string, cfg workloads.Config) workloads.Client {
	t.Helper()
	return loggedBrokenClient(t, mode, cfg, "")
}

// loggedBrokenClient is brokenClient with the driver's stderr in log.
func loggedBrokenClient(t *testing.T, mode string, cfg workloads.Config, log string) workloads.Client {
	t.Helper()
	start := func(cmd *exec.Cmd) error {
		cmd.Env = append(os.Environ(), "ISRLAB_TEST_DRIVER="+mode)
		return cmd.Start()
	}
	spec := workloads.ClientSpec{Client: Exec, Exec: []string{os.Args[0], "-test.run=^$"}}
	cl, err := New(spec, cfg, Env{Seeds: []string{"127.0.0.1:9"}, Start: start, HangGrace: 3 * time.Second, DriverLog: log})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestExecDriverFailures: a driver that crashes, prints garbage, hangs,
// answers an operation that is not in flight or refuses the workload ends
// the workload's Run with an error that says what happened, and the
// history so far is whole: every operation invoked has its completion,
// the one the driver never answered is info. The driver's whole stderr
// is in its log; a hung one is asked for its threads' stacks (SIGQUIT,
// which a Go program answers with its goroutines') before it is killed,
// and the error says where they are.
func TestExecDriverFailures(t *testing.T) {
	tests := []struct {
		mode string
		want []string
		sent bool     // a send was invoked
		log  []string // in the driver's log
	}{
		{"crash", []string{"exited: exit status 3", "broken driver: boom"}, true, []string{"broken driver: boom\n"}},
		{"garbage", []string{"not a completion", "Traceback"}, true, nil},
		{"hang", []string{"hangs: no completion of operation", "its threads' stacks at the hang, is in "}, true,
			[]string{"SIGQUIT: quit", "clients.brokenDriver("}},
		{"wrong-id", []string{"not in flight"}, true, nil},
		{"wrong-type", []string{`type "maybe": want ok, fail or info`}, true, nil},
		{"exit", []string{"exited: exit status 0"}, true, nil},
		{"bad-hello", []string{"its first line is not a hello", "HELLO"}, false, nil},
		{"silent", []string{"did not answer the hello"}, false, nil},
		{"refuse", []string{"client exec: ", "refused the workload: this client has no idempotent producer"}, false, nil},
		// The exit, not the broken pipe the lab's write met first.
		{"close-input", []string{"exited: exit status 5", "broken driver: closed its input"}, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			cfg := workloads.Config{Topic: "t", Partitions: 2, Producers: 1, Consumers: 1, Sends: 3,
				RequestTimeout: time.Second, DeliveryTimeout: time.Second, PollTimeout: 50 * time.Millisecond}
			var mem history.Memory
			rec := history.NewRecorder(&mem, func() time.Duration { return 0 })
			log := filepath.Join(t.TempDir(), "nodes", "client1", "driver.log")
			w, err := workloads.NewLogWith(loggedBrokenClient(t, tc.mode, cfg, log), cfg, rec, []string{"127.0.0.1:9"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err = w.Run(ctx)
			if ctx.Err() != nil {
				t.Fatalf("Run did not end: %v", err)
			}
			var ce *workloads.CapabilityError
			if err == nil || !(errors.Is(err, ErrDriver) || errors.As(err, &ce)) {
				t.Fatalf("Run: %v, want ErrDriver", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			open := map[int]history.Op{}
			sends := 0
			for _, op := range mem.Ops {
				if op.Type == history.Invoke {
					open[op.Process] = op
					continue
				}
				delete(open, op.Process)
				if op.F == history.FSend {
					sends++
					if op.Type != history.Info || !strings.Contains(op.Error, "exec driver") {
						t.Errorf("the unanswered send completed %s (%s), want info naming the driver", op.Type, op.Error)
					}
				}
			}
			for _, op := range open {
				t.Errorf("process %d's %s was never completed", op.Process, op.F)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.sent]; sends != want {
				t.Errorf("%d sends completed, want %d", sends, want)
			}
			b, rerr := os.ReadFile(log)
			if rerr != nil {
				t.Fatalf("the driver's log: %v", rerr)
			}
			for _, w := range tc.log {
				if !strings.Contains(string(b), w) {
					t.Errorf("the driver's log lacks %q:\n%.2000s", w, b)
				}
			}
			t.Logf("%v", err)
		})
	}
}

// TestExecTxnNeedsFeature: a driver whose hello names no "txn" feature
// (one written before the protocol had transactions) does not run the
// txn workload: its Run ends at once with a CapabilityError saying so.
func TestExecTxnNeedsFeature(t *testing.T) {
	cfg := workloads.Config{Topic: "t", Partitions: 2, Producers: 1, Consumers: 1, Sends: 3,
		RequestTimeout: time.Second, DeliveryTimeout: time.Second, PollTimeout: 50 * time.Millisecond}
	var mem history.Memory
	rec := history.NewRecorder(&mem, func() time.Duration { return 0 })
	w, err := workloads.NewTxnWith(brokenClient(t, "no-txn", cfg), cfg, rec, []string{"127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = w.Run(ctx)
	var ce *workloads.CapabilityError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `names no "txn" feature in its hello`) {
		t.Fatalf("Run: %v, want a CapabilityError naming the txn feature", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run did not end at once")
	}
}

// TestExecQueueNeedsFeature: a driver whose hello names no "queue"
// feature does not run the queue workload: the lab's hello asks for it,
// and the run ends at once with a CapabilityError saying so.
func TestExecQueueNeedsFeature(t *testing.T) {
	cfg := workloads.Config{Topic: "t", Partitions: 2, Producers: 1, Consumers: 1, Sends: 3, Subscribe: true,
		RequestTimeout: time.Second, DeliveryTimeout: time.Second, PollTimeout: 50 * time.Millisecond}
	var mem history.Memory
	rec := history.NewRecorder(&mem, func() time.Duration { return 0 })
	w, err := workloads.NewQueueWith(brokenClient(t, "no-queue", cfg), cfg, rec, []string{"127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = w.Run(ctx)
	var ce *workloads.CapabilityError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `names no "queue" feature in its hello: it does not run consumer groups`) {
		t.Fatalf("Run: %v, want a CapabilityError naming the queue feature", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run did not end at once")
	}
}

// TestRedactedLog: a driver's log never holds the hello's password,
// however its stderr is cut into writes: across two writes, in a line
// longer than the log holds back, at the end without a newline.
func TestRedactedLog(t *testing.T) {
	const pw = "pa55-w0rd-of-the-run"
	path := filepath.Join(t.TempDir(), "nodes", "client1", "driver.log")
	l, err := createLog(path, pw)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", maxLogLine+10)
	var want strings.Builder
	for _, chunk := range []string{"one " + pw[:5], pw[5:] + " two\nthree ", long + pw[:8], pw[8:] + "y" + pw, "\nlast " + pw} {
		l.Write([]byte(chunk))
		want.WriteString(chunk)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, w := string(b), strings.ReplaceAll(want.String(), pw, "[hidden]"); got != w {
		t.Errorf("log %d bytes, want %d; holds the password: %v; starts %.60q", len(got), len(w), strings.Contains(got, pw), got)
	}
	var nilLog *redactedLog
	if err := nilLog.Close(); err != nil {
		t.Errorf("a nil log's Close: %v", err)
	}
}
