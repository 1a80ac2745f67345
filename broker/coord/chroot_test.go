package coord

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestChroot: keys land under the chroot, and clients with different
// chroots do not see each other's data.
func TestChroot(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	raw, err := clientv3.New(clientv3.Config{Endpoints: tc.endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tests := []struct {
		chroot  string
		id      int32
		wantKey string
	}{
		{"", 1, "/brokers/ids/1"},
		{"/", 2, "/brokers/ids/2"},
		{"/isrlab", 3, "/isrlab/brokers/ids/3"},
		{"/lab/run-7/", 4, "/lab/run-7/brokers/ids/4"},
	}
	for _, tt := range tests {
		t.Run(tt.chroot, func(t *testing.T) {
			c := tc.dial(t, WithChroot(tt.chroot))
			r, err := c.RegisterBroker(ctx, BrokerInfo{ID: tt.id, Host: "h", Port: 1}, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			resp, err := raw.Get(ctx, tt.wantKey)
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("raw key %s: %v, %v", tt.wantKey, resp, err)
			}
			bs, err := c.Brokers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(bs) != 1 || bs[0].ID != tt.id {
				t.Fatalf("brokers seen under %q: %+v, want only %d", tt.chroot, bs, tt.id)
			}
		})
	}
	if _, err := Dial(ctx, tc.endpoints(), WithChroot("isrlab")); err == nil || !strings.Contains(err.Error(), "must start with /") {
		t.Fatalf("relative chroot: %v", err)
	}
}
