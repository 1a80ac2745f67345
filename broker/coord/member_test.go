package coord

import (
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"testing"
	"time"
)

// TestReplaceMember replaces a member that lost its disk: remove it, add a
// new one on an empty data dir with the returned --initial-cluster, and the
// new member serves the cluster's data.
func TestReplaceMember(t *testing.T) {
	tc := startCluster(t, 3, false)
	ctx := context.Background()
	c := tc.dial(t)
	l, err := c.Campaign(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	if err := c.CreateTopic(ctx, l, TopicSpec{Name: "kept", Assignment: map[int32][]int32{0: {1}}}, nil); err != nil {
		t.Fatal(err)
	}

	victim := (waitLeaderIndex(t, tc) + 1) % 3
	cfg := tc.cfgs[victim]
	tc.stop(victim)
	if err := c.RemoveMember(ctx, cfg.Name); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveMember(ctx, cfg.Name); !errors.Is(err, ErrNoSuchMember) {
		t.Fatalf("second remove: %v, want ErrNoSuchMember", err)
	}
	if ms, err := c.Members(ctx); err != nil || len(ms) != 2 {
		t.Fatalf("members after remove: %+v, %v", ms, err)
	}

	// etcd refuses to add a member until the leader has been connected to
	// every member for 5 s ("unhealthy cluster"): a fresh cluster waits.
	var initial string
	proctest.Eventually(t, 15*time.Second, "condition", func() error {
		var err error
		initial, err = c.AddMember(ctx, cfg.Name, []string{cfg.ListenPeerURLs})
		return err
	})
	var want []string
	for _, cf := range tc.cfgs {
		want = append(want, cf.Name+"="+cf.ListenPeerURLs)
	}
	if got := fmt.Sprint(initial); got != fmt.Sprint(joinSorted(want)) {
		t.Fatalf("initial cluster %q, want %q", got, joinSorted(want))
	}
	cfg.DataDir = t.TempDir() // the disk was lost
	cfg.InitialCluster = initial
	cfg.InitialClusterState = "existing"
	tc.cfgs[victim] = cfg
	if err := tc.start(victim); err != nil {
		t.Fatal(err)
	}

	only, err := Dial(ctx, []string{cfg.ListenClientURLs})
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		_, err := only.Topic(ctx, "kept")
		return err
	})
	ms, err := c.Members(ctx)
	if err != nil || len(ms) != 3 || ms[victim].Name != cfg.Name || len(ms[victim].ClientURLs) == 0 {
		t.Fatalf("members after replace: %+v, %v", ms, err)
	}
}

func joinSorted(parts []string) string {
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += ","
		}
		out += p
	}
	return out
}
