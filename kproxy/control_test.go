package kproxy

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestControlRoundTrip(t *testing.T) {
	p, err := New(Options{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:1", RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sock := filepath.Join(t.TempDir(), "kp.sock")
	done := make(chan error, 1)
	go func() { done <- p.ServeControl(ctx, sock) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		p.ln.Close()
	})
	c := NewClient(sock)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	st, err := c.WaitReady(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Listen != p.Addr() || st.Upstream != "127.0.0.1:1" || st.RunID != "r1" || len(st.Rules) != 0 {
		t.Fatalf("status %+v", st)
	}
	rule := Rule{ID: "nl", API: "produce", Action: "error", Error: "NOT_LEADER_OR_FOLLOWER", Count: 2}
	if err := c.Set(cctx, rule); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(cctx, Rule{ID: "slow", API: "Fetch", Direction: "request", Action: "delay", Delay: 5e8}); err != nil {
		t.Fatal(err)
	}
	st, err = c.Status(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rules) != 2 || st.Rules[0].ID != "nl" || st.Rules[0].Action != "error" || st.Rules[0].Direction != "response" || st.Rules[0].Count != 2 || st.Rules[1].Delay != 5e8 {
		t.Fatalf("rules %+v", st.Rules)
	}
	err = c.Set(cctx, Rule{ID: "bad", API: "Produce", Action: "delay"})
	var re *RemoteError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "delay:") {
		t.Fatalf("bad rule: %v", err)
	}
	if err := c.Set(cctx, Rule{ID: "bad", API: "Nope", Action: "drop"}); err == nil || !strings.Contains(err.Error(), "api:") {
		t.Fatalf("unknown api: %v", err)
	}
	if err := c.Clear(cctx, "nl"); err != nil {
		t.Fatal(err)
	}
	if err := c.Clear(cctx, "nl"); err == nil {
		t.Fatal("clearing a missing rule succeeded")
	}
	if st, _ := c.Status(cctx); len(st.Rules) != 1 || st.Rules[0].ID != "slow" {
		t.Fatalf("rules after clear %+v", st.Rules)
	}
	if err := c.ClearAll(cctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Status(cctx); len(st.Rules) != 0 {
		t.Fatalf("rules after clear-all %+v", st.Rules)
	}
	if _, err := c.Do(cctx, Request{Cmd: "bogus"}); err == nil {
		t.Fatal("unknown command accepted")
	}
}

func TestArgs(t *testing.T) {
	got := strings.Join(Args(Options{Listen: ":9092", Upstream: "b1:9092", RunID: "r", Seed: 7}, "/run/kp.sock"), " ")
	if want := "kproxy --listen :9092 --upstream b1:9092 --control /run/kp.sock --run-id r --seed 7"; got != want {
		t.Fatalf("Args = %q, want %q", got, want)
	}
}
