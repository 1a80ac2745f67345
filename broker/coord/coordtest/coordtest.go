// Package coordtest starts an in-process coordinator for tests of packages
// built on broker/coord: one embedded etcd member on loopback ports, fsync
// off, stopped by t.Cleanup.
package coordtest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/isrlab/isrlab/broker/coord"
)

// Start starts a one-member coordinator in a temporary directory.
func Start(t testing.TB) *coord.Server {
	t.Helper()
	return StartWith(t, NewConfig(t))
}

// NewConfig is a one-member configuration on free loopback ports with a
// temporary data directory and fsync off.
func NewConfig(t testing.TB) coord.ServerConfig {
	t.Helper()
	ports := FreePorts(t, 2)
	return coord.ServerConfig{
		Name:             "c1",
		DataDir:          t.TempDir(),
		ListenClientURLs: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		ListenPeerURLs:   fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		UnsafeNoFsync:    true,
		ReadyTimeout:     30 * time.Second,
	}
}

// StartWith starts a member from cfg; after Close, starting it again with
// the same cfg models a coordinator outage and recovery. t.Cleanup closes
// it.
func StartWith(t testing.TB, cfg coord.ServerConfig) *coord.Server {
	t.Helper()
	s, err := coord.StartServer(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start coordinator: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Dial connects a client to s; t.Cleanup closes it.
func Dial(t testing.TB, s *coord.Server, opts ...coord.Option) *coord.Client {
	t.Helper()
	c, err := coord.Dial(context.Background(), s.ClientURLs(), opts...)
	if err != nil {
		t.Fatalf("dial coordinator: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// FreePorts reserves n loopback ports by listening and closing.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("reserve port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
