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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/kafkaconfig"
	"github.com/isrlab/isrlab/workloads"
)

// leakyDriver is an exec driver that writes the hello it was given to
// the file ISRLAB_TEST_HELLO names (the test's temporary directory), then
// puts the hello's password everywhere the lab takes something from it:
// "leak-refuse" refuses the hello with it; "leak" answers (naming the
// security feature), fails each send with an error holding it, prints it
// to its stderr (cut across the lab's 4 KiB tail, and whole), then exits
// with status 4 at the second send.
func leakyDriver(mode string, hello []byte, in *bufio.Scanner, out *json.Encoder) {
	os.WriteFile(os.Getenv("ISRLAB_TEST_HELLO"), hello, 0o600)
	var h execHello
	json.Unmarshal(hello, &h)
	pw := h.Security["sasl.password"]
	if mode == "leak-refuse" {
		out.Encode(map[string]any{"type": "refused", "error": "bad password " + pw})
		return
	}
	out.Encode(map[string]any{"type": "hello", "client": "leaky", "pid": os.Getpid(), "features": []string{FeatureSecurity}})
	sends := 0
	for in.Scan() {
		var op execOp
		json.Unmarshal(in.Bytes(), &op)
		if op.F != "send" {
			out.Encode(map[string]any{"id": op.ID, "process": op.Process, "type": "ok"})
			continue
		}
		if sends++; sends == 2 {
			// Its start falls just past the tail's cut: the tail begins
			// with the password's last 5 characters.
			last := "\nauthentication failed for password " + pw + "\n"
			fmt.Fprint(os.Stderr, pw+strings.Repeat("x", 4096-5-len(last))+last)
			os.Exit(4)
		}
		out.Encode(map[string]any{"id": op.ID, "process": op.Process, "type": "fail", "error": "SASL authentication failed with " + pw})
	}
}

// securedClient returns an exec client running leakyDriver in mode on a
// secured cluster whose client password (in a file, as the lab keeps
// it) is pw; the hello the driver got lands in helloFile.
func securedClient(t *testing.T, mode, pw, helloFile string, cfg workloads.Config) workloads.Client {
	t.Helper()
	dir := t.TempDir()
	pwFile, caFile := filepath.Join(dir, "client.password"), filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sec := kafkaconfig.ClientSecurity{Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-512", Username: "client", PasswordFile: pwFile, CALocation: caFile}
	start := func(cmd *exec.Cmd) error {
		cmd.Env = append(os.Environ(), "ISRLAB_TEST_DRIVER="+mode, "ISRLAB_TEST_HELLO="+helloFile)
		return cmd.Start()
	}
	spec := workloads.ClientSpec{Client: Exec, Exec: []string{os.Args[0], "-test.run=^$"}}
	cl, err := New(spec, cfg, Env{Seeds: []string{"127.0.0.1:9"}, Start: start, HangGrace: 3 * time.Second, Security: &sec,
		DriverLog: filepath.Join(filepath.Dir(helloFile), "driver.log")})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestExecHelloSecurity: on a secured cluster the hello carries the
// security object in Kafka's names, the password read from its file, and
// asks for the security feature; on a plaintext cluster it has neither,
// so a driver written before them sees the hello it always saw.
func TestExecHelloSecurity(t *testing.T) {
	plain, err := json.Marshal(helloOf(workloads.Config{Topic: "t"}.WithDefaults(), nil, []string{"b:9092"}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plain), "security") {
		t.Errorf("a plaintext hello names security: %s", plain)
	}

	const pw = "s3cret-Pa55word-of-the-run"
	helloFile := filepath.Join(t.TempDir(), "hello.json")
	cfg := workloads.Config{Topic: "t", Partitions: 1, Producers: 1, Sends: 1,
		RequestTimeout: time.Second, DeliveryTimeout: time.Second, PollTimeout: 50 * time.Millisecond}
	var mem history.Memory
	w, err := workloads.NewLogWith(securedClient(t, "leak", pw, helloFile, cfg), cfg, history.NewRecorder(&mem, func() time.Duration { return 0 }), []string{"127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w.Run(ctx)
	b, err := os.ReadFile(helloFile)
	if err != nil {
		t.Fatal(err)
	}
	var h execHello
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "client",
		"sasl.password": pw, "ssl.ca.location": h.Security["ssl.ca.location"]}
	if !strings.HasSuffix(h.Security["ssl.ca.location"], "/ca.pem") || fmt.Sprint(h.Security) != fmt.Sprint(want) {
		t.Errorf("the hello's security: %v, want %v", h.Security, want)
	}
	if !slices.Contains(h.Features, FeatureSecurity) {
		t.Errorf("the hello's features %v lack %q", h.Features, FeatureSecurity)
	}
	for _, k := range []string{"sasl.password.file", "ssl.certificate.location"} {
		if _, ok := h.Security[k]; ok {
			t.Errorf("the hello's security has %s", k)
		}
	}
}

// TestExecSecretRedacted: whatever a driver does with the hello's
// password - in its refusal, in a completion's error, on its stderr (even
// cut by the lab's tail of it) - neither the history, the run's error nor
// the driver's log holds it; they say [hidden] where it was.
func TestExecSecretRedacted(t *testing.T) {
	const pw = "s3cret-Pa55word-of-the-run"
	cfg := workloads.Config{Topic: "t", Partitions: 1, Producers: 1, Sends: 5,
		RequestTimeout: time.Second, DeliveryTimeout: time.Second, PollTimeout: 50 * time.Millisecond}
	for _, mode := range []string{"leak", "leak-refuse"} {
		t.Run(mode, func(t *testing.T) {
			var mem history.Memory
			dir := t.TempDir()
			w, err := workloads.NewLogWith(securedClient(t, mode, pw, filepath.Join(dir, "hello.json"), cfg), cfg,
				history.NewRecorder(&mem, func() time.Duration { return 0 }), []string{"127.0.0.1:9"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = w.Run(ctx)
			if err == nil {
				t.Fatal("Run: no error")
			}
			var ce *workloads.CapabilityError
			if mode == "leak" && !errors.Is(err, ErrDriver) || mode == "leak-refuse" && !errors.As(err, &ce) {
				t.Fatalf("Run: %v", err)
			}
			var hist strings.Builder
			for _, op := range mem.Ops {
				b, _ := json.Marshal(op)
				hist.Write(append(b, '\n'))
			}
			log, rerr := os.ReadFile(filepath.Join(dir, "driver.log"))
			if rerr != nil {
				t.Fatalf("the driver's log: %v", rerr)
			}
			if mode == "leak" && strings.Count(string(log), "[hidden]") != 2 {
				t.Errorf("the driver's log does not hide the password twice:\n%.300s", log)
			}
			for what, s := range map[string]string{"the run's error": err.Error(), "the history": hist.String(), "the driver's log": string(log)} {
				// The password, and the part of it a cut tail keeps.
				if strings.Contains(s, pw) || strings.Contains(s, pw[len(pw)-5:]) {
					t.Errorf("%s holds the password: %s", what, s)
				}
			}
			if !strings.Contains(err.Error(), "[hidden]") {
				t.Errorf("the run's error does not show where the password was: %v", err)
			}
			if mode == "leak" && !strings.Contains(hist.String(), "SASL authentication failed with [hidden]") {
				t.Errorf("the history has no failed send with the password hidden:\n%s", hist.String())
			}
			if mode == "leak" && !strings.Contains(err.Error(), "its stderr ends:\n[hidden]xxx") {
				t.Errorf("the run's error does not hide the password's end the stderr tail begins with: %.200s", err)
			}
			t.Logf("%.300s", err)
		})
	}
}

// TestExecNeedsSecurityFeature: a driver whose hello names no "security"
// feature (one written before it) is refused on a secured cluster,
// saying why, instead of connecting in plaintext to TLS listeners.
func TestExecNeedsSecurityFeature(t *testing.T) {
	cfg := workloads.Config{Topic: "t", Partitions: 1, Producers: 1, Sends: 1,
		RequestTimeout: time.Second, DeliveryTimeout: time.Second, PollTimeout: 50 * time.Millisecond}
	var mem history.Memory
	w, err := workloads.NewLogWith(securedClient(t, "no-security", "pw", filepath.Join(t.TempDir(), "hello.json"), cfg), cfg,
		history.NewRecorder(&mem, func() time.Duration { return 0 }), []string{"127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = w.Run(ctx)
	var ce *workloads.CapabilityError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `names no "security" feature in its hello: it does not run a secured cluster`) {
		t.Fatalf("Run: %v, want a CapabilityError naming the security feature", err)
	}
}
