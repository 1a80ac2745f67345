package coord

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// freeURLs reserves n ports by listening and closing, on a loopback address
// of its own (127.x.y.z), and returns them as http URLs. The own address
// keeps a member's port free across a restart: other processes' outgoing
// connections take their ephemeral ports on 127.0.0.1.
func freeURLs(t testing.TB, n int) []string {
	t.Helper()
	ip := fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(254), rand.IntN(256), 1+rand.IntN(254))
	var ls []net.Listener
	var urls []string
	for range n {
		l, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Fatalf("reserve port: %v", err)
		}
		ls = append(ls, l)
		urls = append(urls, "http://"+l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return urls
}

// testCluster is n in-process members on loopback.
type testCluster struct {
	t       testing.TB
	cfgs    []ServerConfig
	mu      sync.Mutex
	servers []*Server
}

// startCluster starts n members concurrently (a new cluster is ready only
// once a quorum runs) with fsync off unless fsync is true.
func startCluster(t testing.TB, n int, fsync bool) *testCluster {
	t.Helper()
	urls := freeURLs(t, 2*n)
	var initial []string
	cfgs := make([]ServerConfig, n)
	for i := range n {
		name := fmt.Sprintf("c%d", i+1)
		cfgs[i] = ServerConfig{
			Name:             name,
			DataDir:          t.TempDir(),
			ListenClientURLs: urls[2*i],
			ListenPeerURLs:   urls[2*i+1],
			UnsafeNoFsync:    !fsync,
			ReadyTimeout:     30 * time.Second,
		}
		initial = append(initial, name+"="+urls[2*i+1])
	}
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(initial, ",")
	}
	tc := &testCluster{t: t, cfgs: cfgs, servers: make([]*Server, n)}
	t.Cleanup(tc.close)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = tc.start(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return tc
}

func (tc *testCluster) start(i int) error {
	s, err := StartServer(context.Background(), tc.cfgs[i])
	if err != nil {
		return err
	}
	tc.mu.Lock()
	tc.servers[i] = s
	tc.mu.Unlock()
	return nil
}

// stop closes member i (a clean stop; its data stays for a restart).
func (tc *testCluster) stop(i int) {
	tc.mu.Lock()
	s := tc.servers[i]
	tc.servers[i] = nil
	tc.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

func (tc *testCluster) close() {
	for i := range tc.servers {
		tc.stop(i)
	}
}

// leader returns the index of the member that is raft leader, or -1.
func (tc *testCluster) leader() int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for i, s := range tc.servers {
		if s != nil && s.IsLeader() {
			return i
		}
	}
	return -1
}

func (tc *testCluster) endpoints() []string {
	var eps []string
	for _, c := range tc.cfgs {
		eps = append(eps, c.ListenClientURLs)
	}
	return eps
}

func (tc *testCluster) dial(t testing.TB, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(context.Background(), tc.endpoints(), opts...)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// recv waits for a value on ch or fails after within.
func recv[T any](t testing.TB, ch <-chan T, within time.Duration) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("channel closed")
		}
		return v
	case <-time.After(within):
		t.Fatalf("nothing received within %v", within)
	}
	panic("unreachable")
}

// closedWithin fails unless ch is closed within d.
func closedWithin(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not closed within %v", what, d)
	}
}

// procMember is a coordinator member running as a child process (the test
// binary in Run mode, see TestMain), so it can be SIGKILLed.
type procMember struct {
	cfg ServerConfig
	cmd *exec.Cmd
}

// startProc starts m's process and waits for its ready line.
func (m *procMember) start(t testing.TB) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"COORD_TEST_RUN_DATADIR="+m.cfg.DataDir, "COORD_TEST_RUN_NAME="+m.cfg.Name,
		"COORD_TEST_RUN_CLIENT="+m.cfg.ListenClientURLs, "COORD_TEST_RUN_PEER="+m.cfg.ListenPeerURLs,
		"COORD_TEST_RUN_CLUSTER="+m.cfg.InitialCluster)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.cmd = cmd
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		lines <- l
	}()
	if l := recv(t, lines, 30*time.Second); !strings.Contains(l, "ready") {
		t.Fatalf("member %s: %q", m.cfg.Name, l)
	}
}

// kill SIGKILLs the member and reaps it.
func (m *procMember) kill() {
	if m.cmd != nil && m.cmd.ProcessState == nil {
		m.cmd.Process.Kill()
		m.cmd.Wait()
	}
}

// startProcCluster starts n member processes concurrently; cleanup kills
// them.
func startProcCluster(t testing.TB, n int) []*procMember {
	t.Helper()
	tc := &testCluster{} // only for its configs
	urls := freeURLs(t, 2*n)
	var initial []string
	for i := range n {
		name := fmt.Sprintf("c%d", i+1)
		tc.cfgs = append(tc.cfgs, ServerConfig{
			Name: name, DataDir: t.TempDir(),
			ListenClientURLs: urls[2*i],
			ListenPeerURLs:   urls[2*i+1],
		})
		initial = append(initial, name+"="+urls[2*i+1])
	}
	ms := make([]*procMember, n)
	for i := range n {
		tc.cfgs[i].InitialCluster = strings.Join(initial, ",")
		ms[i] = &procMember{cfg: tc.cfgs[i]}
	}
	t.Cleanup(func() {
		for _, m := range ms {
			m.kill()
		}
	})
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { m.start(t) })
	}
	wg.Wait()
	return ms
}
