package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Server defaults: one member on loopback, Kafka-like ports of etcd.
const (
	DefaultName             = "c1"
	DefaultListenClientURLs = "http://127.0.0.1:2379"
	DefaultListenPeerURLs   = "http://127.0.0.1:2380"
	// DefaultReadyTimeout bounds StartServer's wait for the member to join
	// and see a leader.
	DefaultReadyTimeout = 60 * time.Second
)

// ServerConfig configures one coordinator member. URLs are comma-separated
// lists as etcd takes them.
type ServerConfig struct {
	Name    string // member name, DefaultName when empty
	DataDir string // required; created 0700 if missing

	ListenClientURLs    string // DefaultListenClientURLs when empty
	AdvertiseClientURLs string // the listen URLs when empty
	ListenPeerURLs      string // DefaultListenPeerURLs when empty
	AdvertisePeerURLs   string // the listen URLs when empty

	// InitialCluster is "c1=http://h1:2380,c2=http://h2:2380,..."; empty
	// means this member alone.
	InitialCluster string
	// InitialClusterState is "new" (default) or "existing".
	InitialClusterState string

	// LogFile receives etcd's own log (JSON lines); <DataDir>/etcd.log when
	// empty.
	LogFile string
	// UnsafeNoFsync skips fsync in etcd's WAL and backend: tests only.
	UnsafeNoFsync bool
	// HeartbeatInterval and ElectionTimeout are raft's timing (etcd's
	// defaults, 100 ms and 1000 ms, when 0). Every member of a cluster must
	// use the same values; the election timeout must be at least 5 times
	// the heartbeat interval.
	HeartbeatInterval time.Duration
	ElectionTimeout   time.Duration
	// ReadyTimeout bounds the wait for readiness; DefaultReadyTimeout when 0.
	ReadyTimeout time.Duration
	// Logger receives isrlab's own lines about the member (not etcd's).
	Logger *slog.Logger
}

// Server is a running coordinator member (embedded etcd).
type Server struct {
	cfg  ServerConfig
	etcd *embed.Etcd
	lock *os.File
	log  *slog.Logger
	once sync.Once
}

// withDefaults fills in the empty fields of c.
func (c ServerConfig) withDefaults() ServerConfig {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.ListenClientURLs == "" {
		c.ListenClientURLs = DefaultListenClientURLs
	}
	if c.AdvertiseClientURLs == "" {
		c.AdvertiseClientURLs = c.ListenClientURLs
	}
	if c.ListenPeerURLs == "" {
		c.ListenPeerURLs = DefaultListenPeerURLs
	}
	if c.AdvertisePeerURLs == "" {
		c.AdvertisePeerURLs = c.ListenPeerURLs
	}
	if c.InitialCluster == "" {
		var parts []string
		for _, u := range strings.Split(c.AdvertisePeerURLs, ",") {
			parts = append(parts, c.Name+"="+u)
		}
		c.InitialCluster = strings.Join(parts, ",")
	}
	if c.InitialClusterState == "" {
		c.InitialClusterState = embed.ClusterStateFlagNew
	}
	if c.LogFile == "" && c.DataDir != "" {
		c.LogFile = filepath.Join(c.DataDir, "etcd.log")
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func parseURLs(flag, s string) ([]url.URL, error) {
	var out []url.URL
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		if u.Scheme != "http" && u.Scheme != "unix" || u.Host == "" {
			return nil, fmt.Errorf("%s: %q is not an http://host:port URL", flag, part)
		}
		out = append(out, *u)
	}
	return out, nil
}

// etcdConfig translates c (with defaults) into etcd's configuration.
func (c ServerConfig) etcdConfig() (*embed.Config, error) {
	ec := embed.NewConfig()
	ec.Name = c.Name
	ec.Dir = c.DataDir
	var err error
	if ec.ListenClientUrls, err = parseURLs("listen-client-urls", c.ListenClientURLs); err != nil {
		return nil, err
	}
	if ec.AdvertiseClientUrls, err = parseURLs("advertise-client-urls", c.AdvertiseClientURLs); err != nil {
		return nil, err
	}
	if ec.ListenPeerUrls, err = parseURLs("listen-peer-urls", c.ListenPeerURLs); err != nil {
		return nil, err
	}
	if ec.AdvertisePeerUrls, err = parseURLs("advertise-peer-urls", c.AdvertisePeerURLs); err != nil {
		return nil, err
	}
	switch c.InitialClusterState {
	case embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting:
	default:
		return nil, fmt.Errorf("initial-cluster-state %q: want %q or %q", c.InitialClusterState, embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting)
	}
	ec.InitialCluster = c.InitialCluster
	ec.ClusterState = c.InitialClusterState
	ec.InitialClusterToken = "isrlab"
	// Without compaction the revision history grows without bound under an
	// ISR storm; an hour keeps every watch a lab run opens resumable.
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"
	ec.UnsafeNoFsync = c.UnsafeNoFsync
	if c.HeartbeatInterval > 0 {
		ec.TickMs = uint(c.HeartbeatInterval.Milliseconds())
	}
	if c.ElectionTimeout > 0 {
		ec.ElectionMs = uint(c.ElectionTimeout.Milliseconds())
	}
	if ec.TickMs == 0 || ec.ElectionMs < 5*ec.TickMs {
		return nil, fmt.Errorf("election timeout %d ms must be at least 5 times the heartbeat interval %d ms", ec.ElectionMs, ec.TickMs)
	}
	ec.Logger = "zap"
	ec.LogOutputs = []string{c.LogFile}
	ec.LogLevel = "info"
	// Plain gRPC only: the HTTP gateway is not part of isrlab's interface.
	ec.EnableGRPCGateway = false
	return ec, nil
}

// StartServer starts a coordinator member and returns once it has joined
// the cluster and a leader exists, or fails after ReadyTimeout (for a new
// multi-member cluster: start the other members concurrently). It first
// takes a non-blocking lock on <DataDir>/.lock, so a second process on the
// same directory fails at once instead of hanging on etcd's database lock.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("start coordinator: no data dir")
	}
	cfg = cfg.withDefaults()
	ec, err := cfg.etcdConfig()
	if err != nil {
		return nil, fmt.Errorf("start coordinator %s: %w", cfg.Name, err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("start coordinator %s: %w", cfg.Name, err)
	}
	lock, err := lockDir(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("start coordinator %s: %w", cfg.Name, err)
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("start coordinator %s (etcd log: %s): %w", cfg.Name, cfg.LogFile, err)
	}
	s := &Server{cfg: cfg, etcd: e, lock: lock, log: cfg.Logger}
	if err := s.waitReady(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("start coordinator %s (etcd log: %s): %w", cfg.Name, cfg.LogFile, err)
	}
	s.log.Info("coordinator ready", "node", cfg.Name, "client_urls", cfg.AdvertiseClientURLs)
	return s, nil
}

// lockDir takes an exclusive, non-blocking flock on dir/.lock. The lock is
// per open file, so it also refuses a second server in the same process.
func lockDir(dir string) (*os.File, error) {
	p := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another coordinator (%s is locked)", dir, p)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	return f, nil
}

func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	select {
	case <-s.etcd.Server.ReadyNotify():
	case err := <-s.etcd.Err():
		return fmt.Errorf("etcd stopped: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("not ready (joined the cluster?) after %v: %w", s.cfg.ReadyTimeout, ctx.Err())
	}
	// Ready means the member published itself through raft; wait until it
	// also sees the leader (it may have lost it again since).
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.etcd.Server.Leader() == 0 {
		select {
		case <-t.C:
		case err := <-s.etcd.Err():
			return fmt.Errorf("etcd stopped: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("no leader after %v: %w", s.cfg.ReadyTimeout, ctx.Err())
		}
	}
	return nil
}

// Name is the member name.
func (s *Server) Name() string { return s.cfg.Name }

// ClientURLs are the advertised client URLs, for Dial.
func (s *Server) ClientURLs() []string {
	return strings.Split(s.cfg.AdvertiseClientURLs, ",")
}

// IsLeader reports whether this member is the etcd (raft) leader.
func (s *Server) IsLeader() bool { return s.etcd.Server.Leader() == s.etcd.Server.MemberID() }

// HasLeader reports whether this member currently knows a leader.
func (s *Server) HasLeader() bool { return s.etcd.Server.Leader() != 0 }

// Err delivers a fatal error of the running member (for example a listener
// failing); it is closed after Close.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the member and releases the data dir. Idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		s.etcd.Close()
		s.lock.Close()
		s.log.Info("coordinator stopped", "node", s.cfg.Name)
	})
}
