package coord

import (
	"context"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestSessionSurvivesPausedLeader SIGSTOPs the etcd leader for longer than
// the client's keepalive takes to give up on it (10 s + 2 s) but less than
// the 18 s session: the broker's registration must survive with its epoch
// (MACHINE-NOTES: a 2 s session does not).
func TestSessionSurvivesPausedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 15 s: pauses the etcd leader past the client keepalive timeout")
	}
	ms := startProcCluster(t, 3)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.cfg.ListenClientURLs)
	}
	ctx := context.Background()
	c, err := Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.RegisterBroker(ctx, BrokerInfo{ID: 1, Host: "h", Port: 1}, DefaultSessionTimeout)
	if err != nil {
		t.Fatal(err)
	}

	leader := -1
	for i, m := range ms {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.cfg.ListenClientURLs}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, m.cfg.ListenClientURLs)
		cancel()
		cli.Close()
		if err == nil && st.Leader == st.Header.MemberId {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no etcd leader")
	}
	p := ms[leader].cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Signal(syscall.SIGCONT) })

	// Wait for a renewal that reaches the survivors later than the client's
	// keepalive timeout (10 s + 2 s): by then a connection stuck on the
	// paused member must have been replaced, or the lease would be lost.
	var survivors []string
	for i, m := range ms {
		if i != leader {
			survivors = append(survivors, m.cfg.ListenClientURLs)
		}
	}
	admin, err := clientv3.New(clientv3.Config{Endpoints: survivors, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	paused := time.Now()
	prev := int64(-1)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for renewed := false; !renewed; {
		select {
		case <-r.Done():
			t.Fatal("session lost while the etcd leader was paused")
		case <-tick.C:
		}
		if time.Since(paused) > 30*time.Second {
			t.Fatal("no lease renewal reached the survivors within 30 s")
		}
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		ttl, err := admin.TimeToLive(tctx, r.session.Lease())
		cancel()
		if err != nil {
			continue // no leader among the survivors yet
		}
		if ttl.TTL <= 0 {
			t.Fatalf("lease expired %v after the pause", time.Since(paused))
		}
		renewed = time.Since(paused) > 12*time.Second && prev >= 0 && ttl.TTL > prev
		prev = ttl.TTL
	}
	p.Signal(syscall.SIGCONT)
	info, ok, err := c.Broker(ctx, 1)
	if err != nil || !ok || info.Epoch != r.Epoch() {
		t.Fatalf("registration after the pause: %+v ok=%v err=%v, want epoch %d", info, ok, err, r.Epoch())
	}
	select {
	case <-r.Done():
		t.Fatal("session lost after the pause")
	default:
	}
}
