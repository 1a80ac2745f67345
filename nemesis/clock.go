package nemesis

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/isrlab/isrlab/compose"
)

func init() {
	register(func() Fault { return &ClockSkew{} })
}

// ClockSkew moves the clock of isrlab brokers by OffsetMs (negative goes
// back), through each broker's /v1/clock on its metrics listener; Heal sets
// the skew back to 0. Only the broker's own time moves (replica lag, ISR
// shrink checks, segment rolls, retention); clients keep their clocks.
type ClockSkew struct {
	procNodes
	OffsetMs int64 `json:"offset_ms"`
}

// Kind implements Fault.
func (f *ClockSkew) Kind() string { return "clock-skew" }

// Resolve implements Fault: the targets must be brokers.
func (f *ClockSkew) Resolve(ctx context.Context, env *Env) error {
	if err := f.resolve(ctx, env, f.Kind()); err != nil {
		return err
	}
	for _, name := range f.Resolved {
		if n, _ := env.node(name); n == nil || n.Role != compose.RoleBroker {
			return fmt.Errorf("%w: clock-skew: %s is not a broker", ErrBadFault, name)
		}
	}
	return nil
}

// Inject implements Fault.
func (f *ClockSkew) Inject(ctx context.Context, env *Env) error { return f.set(ctx, env, f.OffsetMs) }

// Heal implements Fault.
func (f *ClockSkew) Heal(ctx context.Context, env *Env) error { return f.set(ctx, env, 0) }

func (f *ClockSkew) set(ctx context.Context, env *Env, offset int64) error {
	dial := env.Cluster.Dial()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return dial(ctx, network, addr) },
	}}
	body, _ := json.Marshal(map[string]int64{"offset_ms": offset})
	return f.each(env, func(n *compose.Node) error {
		url := "http://" + net.JoinHostPort(n.Addr.String(), strconv.Itoa(compose.MetricsPort)) + "/v1/clock"
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("clock-skew %s: %w", n.Name, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("clock-skew %s: %s", n.Name, resp.Status)
		}
		return nil
	})
}
