package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/isrlab/isrlab/clusterapi"
)

// HookRule is a broker test hook's rule and HookState a rule as the
// broker reports it (clusterapi, /v1/testhooks).
type (
	HookRule  = clusterapi.HookRule
	HookState = clusterapi.HookState
)

// Ref returns a pointer to v, for HookRule's optional fields.
func Ref(v int32) *int32 { return &v }

// Hook adds rule to broker id's test hooks (the cluster runs with
// ClusterOptions.TestHooks) and returns the rule's id.
func (c *Cluster) Hook(id int32, rule HookRule) int {
	c.t.Helper()
	body, _ := json.Marshal(rule)
	var st HookState
	if err := c.hookCall(id, http.MethodPost, "", body, &st); err != nil {
		c.t.Fatalf("b%d: add test hook %+v: %v", id, rule, err)
	}
	return st.ID
}

// Unhook removes rule from broker id, letting the requests it holds through.
func (c *Cluster) Unhook(id int32, rule int) {
	c.t.Helper()
	if err := c.hookCall(id, http.MethodDelete, fmt.Sprintf("?id=%d", rule), nil, nil); err != nil {
		c.t.Fatalf("b%d: remove test hook %d: %v", id, rule, err)
	}
}

// HookState returns rule's state on broker id.
func (c *Cluster) HookState(id int32, rule int) (HookState, error) {
	var out struct {
		Rules []HookState `json:"rules"`
	}
	if err := c.hookCall(id, http.MethodGet, "", nil, &out); err != nil {
		return HookState{}, err
	}
	for _, st := range out.Rules {
		if st.ID == rule {
			return st, nil
		}
	}
	return HookState{}, fmt.Errorf("b%d has no test hook %d", id, rule)
}

// WaitHeld waits until rule holds at least n requests on broker id.
func (c *Cluster) WaitHeld(id int32, rule, n int, within time.Duration, what string) {
	c.t.Helper()
	Eventually(c.t, within, what, func() error {
		st, err := c.HookState(id, rule)
		if err != nil {
			return err
		}
		if st.Held < n {
			return fmt.Errorf("b%d's hook %d (%s) holds %d requests (matched %d)", id, rule, st.API, st.Held, st.Matched)
		}
		return nil
	})
}

func (c *Cluster) hookCall(id int32, method, query string, body []byte, out any) error {
	addr, ok := c.MetricsAddrs[id]
	if !ok {
		return fmt.Errorf("b%d has no metrics address: start the cluster with ClusterOptions.TestHooks", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+clusterapi.TestHooksPath+query, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}
