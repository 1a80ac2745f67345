package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// TestTestHooks: a hold rule keeps the requests it matches (and only
// those) from the handlers until it is removed, a delay rule delays them,
// bad rules are refused, and without test.hooks.enable there is no
// endpoint and no hook.
func TestTestHooks(t *testing.T) {
	b := startBroker(t, t.TempDir(), "test.hooks.enable=true", "metrics.listen=127.0.0.1:0")
	createTopic(t, b.client(t), "h", 2, nil)
	hooks := "http://" + b.MetricsAddr() + "/v1/testhooks"
	call := func(method, url, body string, out any) int {
		t.Helper()
		req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if out != nil && resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, url, err, data)
			}
		}
		return resp.StatusCode
	}
	rule := func(id int) HookState {
		t.Helper()
		var out struct{ Rules []HookState }
		call(http.MethodGet, hooks, "", &out)
		for _, r := range out.Rules {
			if r.ID == id {
				return r
			}
		}
		t.Fatalf("no rule %d in %+v", id, out.Rules)
		return HookState{}
	}
	listOffsets := func(partition int32) <-chan error {
		done := make(chan error, 1)
		go func() {
			cl := wire.NewClient(b.Addrs()[0], "hooktest", nil)
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req := kmsg.NewPtrListOffsetsRequest()
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = "h"
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = partition, -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			_, err := cl.Request(ctx, req)
			done <- err
		}()
		return done
	}

	var hold HookState
	if code := call(http.MethodPost, hooks, `{"api": "ListOffsets", "topic": "h", "partition": 0}`, &hold); code != http.StatusOK {
		t.Fatalf("add hold rule: %d", code)
	}
	held := listOffsets(0)
	proctest.Eventually(t, 10*time.Second, "the rule holds the ListOffsets for h/0", func() error {
		if r := rule(hold.ID); r.Held != 1 || r.Matched != 1 {
			return fmt.Errorf("%+v", r)
		}
		return nil
	})
	// Another partition is not held, and neither was the held request
	// answered meanwhile.
	if err := <-listOffsets(1); err != nil {
		t.Fatalf("ListOffsets for h/1 beside the hold: %v", err)
	}
	select {
	case err := <-held:
		t.Fatalf("the held ListOffsets was answered (%v)", err)
	default:
	}
	if code := call(http.MethodDelete, fmt.Sprintf("%s?id=%d", hooks, hold.ID), "", nil); code != http.StatusOK {
		t.Fatalf("remove rule: %d", code)
	}
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("the released ListOffsets: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the ListOffsets was not answered after its rule was removed")
	}

	var delay HookState
	call(http.MethodPost, hooks, `{"api": "ListOffsets", "delay_ms": 300}`, &delay)
	begin := time.Now()
	if err := <-listOffsets(1); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d < 300*time.Millisecond {
		t.Fatalf("delayed ListOffsets answered after %v", d)
	}
	if r := rule(delay.ID); r.Matched != 1 || r.Held != 0 {
		t.Fatalf("delay rule after its request: %+v", r)
	}
	call(http.MethodDelete, hooks, "", nil)

	for _, bad := range []string{`{"api": "Nope"}`, `{"api": "Fetch", "replica": 2}`, `{"api": "Fetch", "delay_ms": -1}`} {
		if code := call(http.MethodPost, hooks, bad, nil); code != http.StatusBadRequest {
			t.Errorf("rule %s: status %d, want 400", bad, code)
		}
	}

	off := startBroker(t, t.TempDir(), "metrics.listen=127.0.0.1:0")
	if off.testHooks != nil {
		t.Fatal("test hooks without test.hooks.enable")
	}
	if code := call(http.MethodGet, "http://"+off.MetricsAddr()+"/v1/testhooks", "", nil); code != http.StatusNotFound {
		t.Fatalf("/v1/testhooks without test.hooks.enable: %d, want 404", code)
	}
}
