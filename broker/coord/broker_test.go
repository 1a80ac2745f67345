package coord

import (
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"testing"
	"time"
)

func TestRegisterBroker(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	c := tc.dial(t, WithSessionTimeout(2*time.Second))

	r1, err := c.RegisterBroker(ctx, BrokerInfo{ID: 1, Host: "10.0.0.1", Port: 9092, Rack: "a"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Epoch() <= 0 {
		t.Fatalf("epoch %d, want > 0", r1.Epoch())
	}
	r2, err := c.RegisterBroker(ctx, BrokerInfo{ID: 2, Host: "10.0.0.2", Port: 9092}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Epoch() <= r1.Epoch() {
		t.Fatalf("second epoch %d not above first %d", r2.Epoch(), r1.Epoch())
	}

	// A duplicate id is refused and names the holder's epoch.
	_, err = c.RegisterBroker(ctx, BrokerInfo{ID: 1, Host: "10.0.0.9", Port: 9092}, 0)
	var inUse *BrokerIDInUseError
	if !errors.Is(err, ErrBrokerIDInUse) || !errors.As(err, &inUse) || inUse.Epoch != r1.Epoch() {
		t.Fatalf("duplicate registration: got %v, want ErrBrokerIDInUse with epoch %d", err, r1.Epoch())
	}

	bs, err := c.Brokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []BrokerInfo{
		{ID: 1, Host: "10.0.0.1", Port: 9092, Rack: "a", Epoch: r1.Epoch()},
		{ID: 2, Host: "10.0.0.2", Port: 9092, Epoch: r2.Epoch()},
	}
	if got := stripTimestamps(bs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("brokers:\n got %+v\nwant %+v", got, want)
	}
	info, ok, err := c.Broker(ctx, 2)
	if err != nil || !ok || info.Epoch != r2.Epoch() {
		t.Fatalf("Broker(2) = %+v, %v, %v", info, ok, err)
	}

	// A clean shutdown deletes the registration at once.
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	closedWithin(t, r2.Done(), time.Second, "Done after Close")
	if _, ok, err := c.Broker(ctx, 2); err != nil || ok {
		t.Fatalf("broker 2 after Close: ok=%v err=%v", ok, err)
	}
}

func stripTimestamps(bs []BrokerInfo) []BrokerInfo {
	out := append([]BrokerInfo(nil), bs...)
	for i := range out {
		out[i].Timestamp = 0
	}
	return out
}

// TestSessionLoss covers the two ways a broker loses its session: the lease
// is revoked (Done fires, the key goes), and the broker's process dies (its
// client closes without revoking; the key lingers until the TTL, so
// re-registering before that is refused, after it gets a larger epoch).
func TestSessionLoss(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	admin := tc.dial(t)

	t.Run("revoked", func(t *testing.T) {
		c := tc.dial(t)
		r, err := c.RegisterBroker(ctx, BrokerInfo{ID: 7, Host: "h", Port: 1}, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Etcd().Revoke(ctx, r.session.Lease()); err != nil {
			t.Fatal(err)
		}
		closedWithin(t, r.Done(), 5*time.Second, "Done after revoke")
		r2, err := c.RegisterBroker(ctx, BrokerInfo{ID: 7, Host: "h", Port: 1}, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer r2.Close()
		if r2.Epoch() <= r.Epoch() {
			t.Fatalf("re-registration epoch %d not above %d", r2.Epoch(), r.Epoch())
		}
	})

	t.Run("expired", func(t *testing.T) {
		dead, err := Dial(ctx, tc.endpoints())
		if err != nil {
			t.Fatal(err)
		}
		r, err := dead.RegisterBroker(ctx, BrokerInfo{ID: 8, Host: "h", Port: 1}, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		dead.Close() // a crash: no revoke
		closedWithin(t, r.Done(), time.Second, "Done after client close")
		_, err = admin.RegisterBroker(ctx, BrokerInfo{ID: 8, Host: "h", Port: 1}, 2*time.Second)
		if !errors.Is(err, ErrBrokerIDInUse) {
			t.Fatalf("register while the old session lives: %v, want ErrBrokerIDInUse", err)
		}
		var r2 *Registration
		proctest.Eventually(t, 10*time.Second, "condition", func() error {
			var err error
			r2, err = admin.RegisterBroker(ctx, BrokerInfo{ID: 8, Host: "h", Port: 1}, 2*time.Second)
			return err
		})
		defer r2.Close()
		if r2.Epoch() <= r.Epoch() {
			t.Fatalf("re-registration epoch %d not above %d", r2.Epoch(), r.Epoch())
		}
	})
}

func TestWatchBrokers(t *testing.T) {
	tc := startCluster(t, 1, false)
	c := tc.dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := c.WatchBrokers(ctx)
	if ev := recv(t, ch, 5*time.Second); len(ev.Brokers) != 0 {
		t.Fatalf("initial snapshot %+v, want empty", ev)
	}
	r, err := c.RegisterBroker(ctx, BrokerInfo{ID: 3, Host: "h", Port: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitBrokers(t, ch, []int32{3})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	waitBrokers(t, ch, nil)
	cancel()
	for range ch { // drains, then closes
	}
}

// waitBrokers reads snapshots until one lists exactly ids.
func waitBrokers(t *testing.T, ch <-chan BrokersEvent, ids []int32) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			var got []int32
			for _, b := range ev.Brokers {
				got = append(got, b.ID)
			}
			if fmt.Sprint(got) == fmt.Sprint(ids) {
				return
			}
		case <-deadline:
			t.Fatalf("no snapshot with brokers %v", ids)
		}
	}
}

// TestClosedClient: after Close every call fails and every watch is closed
// at once; Close is idempotent.
func TestClosedClient(t *testing.T) {
	tc := startCluster(t, 1, false)
	c, err := Dial(context.Background(), tc.endpoints())
	if err != nil {
		t.Fatal(err)
	}
	live := c.WatchTopics(context.Background())
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := context.Background()
	for _, ch := range []<-chan TopicsEvent{live, c.WatchTopics(ctx)} {
		for range ch { // a snapshot may have been delivered; then closed
		}
	}
	if _, ok := <-c.WatchBrokers(ctx); ok {
		t.Fatal("WatchBrokers after Close delivered a snapshot")
	}
	calls := []struct {
		name string
		do   func() error
	}{
		{"Brokers", func() error { _, err := c.Brokers(ctx); return err }},
		{"RegisterBroker", func() error { _, err := c.RegisterBroker(ctx, BrokerInfo{ID: 1}, 0); return err }},
		{"Campaign", func() error { _, err := c.Campaign(ctx, 1); return err }},
		{"SetPartitionStates", func() error {
			_, err := c.SetPartitionStates(ctx, nil, []PartitionStateUpdate{{Topic: "t"}})
			return err
		}},
	}
	for _, call := range calls {
		t.Run(call.name, func(t *testing.T) {
			errc := make(chan error, 1)
			go func() { errc <- call.do() }()
			if err := recv(t, errc, 10*time.Second); err == nil {
				t.Fatal("call on a closed client succeeded")
			}
		})
	}
}
