package coord

import (
	"context"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestSessionSurvivesPausedLeader SIGSTOPs the etcd leader for two session
// timeouts of Kafka 2.4's 6 s: no broker session may be lost, although some
// clients' renewals go to the paused member and hang there (MACHINE-NOTES:
// with etcd's own keepalive a 2 s session is lost, and sessions shorter than
// its 7 s request timeout are at risk).
func TestSessionSurvivesPausedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 15 s: pauses the etcd leader for two 6 s sessions")
	}
	const ttl = 6 * time.Second
	ms := startProcCluster(t, 3)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.cfg.ListenClientURLs)
	}
	ctx := context.Background()
	var regs []*Registration
	for i := range int32(10) { // ten clients: some renew through the leader
		c, err := Dial(ctx, eps)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r, err := c.RegisterBroker(ctx, BrokerInfo{ID: i, Host: "h", Port: 1}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, r)
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

	// The property is about elapsed time: watch every session for two
	// session timeouts while the leader stays paused.
	paused := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(paused) < 2*ttl {
		for _, r := range regs {
			select {
			case <-r.Done():
				t.Fatalf("broker %d lost its session %v after the leader was paused", r.Info().ID, time.Since(paused))
			default:
			}
		}
		<-tick.C
	}
	var survivors []string
	for i, m := range ms {
		if i != leader {
			survivors = append(survivors, m.cfg.ListenClientURLs)
		}
	}
	admin, err := Dial(ctx, survivors)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, r := range regs {
		info, ok, err := admin.Broker(ctx, r.Info().ID)
		if err != nil || !ok || info.Epoch != r.Epoch() {
			t.Fatalf("broker %d while the leader is paused: %+v ok=%v err=%v, want epoch %d", r.Info().ID, info, ok, err, r.Epoch())
		}
	}
}
