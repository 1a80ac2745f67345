package coord

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as "isrlab coordinator" for
// TestRunProcess: the same Run the command calls, under real signals.
func TestMain(m *testing.M) {
	if dir := os.Getenv("COORD_TEST_RUN_DATADIR"); dir != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := Run(ctx, ServerConfig{
			Name:             os.Getenv("COORD_TEST_RUN_NAME"),
			DataDir:          dir,
			ListenClientURLs: os.Getenv("COORD_TEST_RUN_CLIENT"),
			ListenPeerURLs:   os.Getenv("COORD_TEST_RUN_PEER"),
			InitialCluster:   os.Getenv("COORD_TEST_RUN_CLUSTER"),
			UnsafeNoFsync:    true,
		}, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRunProcess(t *testing.T) {
	urls := freeURLs(t, 2)
	dir := t.TempDir()
	clientURL := urls[0]
	start := func() (*exec.Cmd, *bufio.Reader, *strings.Builder) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "COORD_TEST_RUN_DATADIR="+dir, "COORD_TEST_RUN_CLIENT="+clientURL,
			"COORD_TEST_RUN_PEER="+urls[1])
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		return cmd, bufio.NewReader(stdout), &stderr
	}
	waitExit := func(cmd *exec.Cmd) error {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("coordinator process did not exit")
			return nil
		}
	}

	cmd, out, _ := start()
	lines := make(chan string, 1)
	go func() {
		l, _ := out.ReadString('\n')
		lines <- l
	}()
	line := recv(t, lines, 30*time.Second)
	if want := "coordinator c1 ready: client " + clientURL; !strings.HasPrefix(line, want) {
		t.Fatalf("ready line %q, want prefix %q", line, want)
	}
	c, err := Dial(context.Background(), []string{clientURL})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.RegisterBroker(context.Background(), BrokerInfo{ID: 1, Host: "h", Port: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Epoch() <= 0 {
		t.Fatalf("epoch %d", r.Epoch())
	}
	c.Close()

	// A second process on the same data dir fails at once, naming the dir.
	cmd2, _, stderr2 := start()
	if err := waitExit(cmd2); err == nil || !strings.Contains(stderr2.String(), dir) || !strings.Contains(stderr2.String(), "in use") {
		t.Fatalf("second process: err %v, stderr %q", err, stderr2.String())
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(cmd); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd.log")); err != nil {
		t.Fatalf("etcd log: %v", err)
	}
}

func TestDataDirLock(t *testing.T) {
	tc := startCluster(t, 1, false)
	cfg := tc.cfgs[0]
	urls := freeURLs(t, 2)
	cfg.ListenClientURLs, cfg.ListenPeerURLs = urls[0], urls[1]
	cfg.InitialCluster = ""
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := StartServer(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), cfg.DataDir) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second server on %s: %v", cfg.DataDir, err)
	}
	if ctx.Err() != nil {
		t.Fatal("second server waited for its deadline instead of failing at once")
	}
	// The lock goes with the server: a restart on the same dir works.
	tc.stop(0)
	if err := tc.start(0); err != nil {
		t.Fatalf("restart after close: %v", err)
	}
}

func TestServerConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  ServerConfig
		want string
	}{
		{"no data dir", ServerConfig{}, "no data dir"},
		{"bad client url", ServerConfig{DataDir: "d", ListenClientURLs: "127.0.0.1:2379"}, "listen-client-urls"},
		{"bad peer url", ServerConfig{DataDir: "d", ListenPeerURLs: "tcp://x:1"}, "listen-peer-urls"},
		{"bad state", ServerConfig{DataDir: "d", InitialClusterState: "old"}, "initial-cluster-state"},
		{"election too short", ServerConfig{DataDir: "d", HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond}, "election timeout"},
		{"heartbeat under 1 ms", ServerConfig{DataDir: "d", HeartbeatInterval: time.Microsecond}, "heartbeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.DataDir != "" {
				tt.cfg.DataDir = filepath.Join(t.TempDir(), tt.cfg.DataDir)
			}
			_, err := StartServer(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func TestServerDefaults(t *testing.T) {
	got := ServerConfig{DataDir: "/d"}.withDefaults()
	want := ServerConfig{
		Name: "c1", DataDir: "/d",
		ListenClientURLs: "http://127.0.0.1:2379", AdvertiseClientURLs: "http://127.0.0.1:2379",
		ListenPeerURLs: "http://127.0.0.1:2380", AdvertisePeerURLs: "http://127.0.0.1:2380",
		InitialCluster: "c1=http://127.0.0.1:2380", InitialClusterState: "new",
		LogFile: "/d/etcd.log", ReadyTimeout: DefaultReadyTimeout,
	}
	got.Logger = nil
	if got != want {
		t.Fatalf("defaults:\n got %+v\nwant %+v", got, want)
	}
}

// TestQuorum runs three members: losing one keeps the coordinator working,
// losing two makes calls fail with ErrNoQuorum within their timeout, and
// restarting them recovers.
func TestQuorum(t *testing.T) {
	tc := startCluster(t, 3, false)
	ctx := context.Background()
	c := tc.dial(t, WithCallTimeout(time.Second))
	l, err := c.Campaign(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, l, TopicSpec{Name: "t", Assignment: map[int32][]int32{0: {1}}}, map[int32]PartitionState{0: {Leader: 1, ISR: []int32{1}}}); err != nil {
		t.Fatal(err)
	}
	bump := func() error {
		st, err := c.PartitionState(ctx, "t", 0)
		if err != nil {
			return err
		}
		st.LeaderEpoch++
		_, err = c.SetPartitionStates(ctx, l, []PartitionStateUpdate{{Topic: "t", Partition: 0, State: st, ExpectedVersion: st.Version}})
		return err
	}
	if err := bump(); err != nil {
		t.Fatal(err)
	}

	// Stop the raft leader: a new one is elected and writes work again.
	first := tc.leader()
	if first < 0 {
		t.Fatal("no leader")
	}
	tc.stop(first)
	proctest.Eventually(t, 15*time.Second, "condition", bump)

	// Stop a second member: no quorum. Calls fail with ErrNoQuorum, and a
	// session that cannot be renewed ends.
	reg, err := c.RegisterBroker(ctx, BrokerInfo{ID: 4, Host: "h", Port: 1}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	second := (first + 1) % 3
	tc.stop(second)
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"write", bump},
		{"read", func() error { _, err := c.Topics(ctx); return err }},
		{"register", func() error { _, err := c.RegisterBroker(ctx, BrokerInfo{ID: 9}, 0); return err }},
		{"controller", func() error { _, _, err := c.Controller(ctx); return err }},
	} {
		t.Run(call.name, func(t *testing.T) {
			errc := make(chan error, 1)
			go func() { errc <- call.do() }()
			err := recv(t, errc, 30*time.Second)
			if !errors.Is(err, ErrNoQuorum) {
				t.Fatalf("got %v, want ErrNoQuorum", err)
			}
		})
	}

	closedWithin(t, reg.Done(), 10*time.Second, "session without quorum")

	// Restart both: the coordinator recovers with the data intact.
	errs := make(chan error, 2)
	for _, i := range []int{first, second} {
		go func() { errs <- tc.start(i) }()
	}
	for range 2 {
		if err := recv(t, errs, 40*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	proctest.Eventually(t, 15*time.Second, "condition", bump)
	if got, err := c.Topic(ctx, "t"); err != nil || got.Name != "t" {
		t.Fatalf("topic after recovery: %+v, %v", got, err)
	}
}
