package nemesis

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/isrlab/isrlab/clusterapi"
	"github.com/isrlab/isrlab/compose"
)

// StrobeArg, first among the helper's arguments, makes it a clock strober.
const StrobeArg = "strobe"

// StrobeTarget is one broker a strober moves: the network namespace it is
// reached from (the broker's own, so that partitions at the bridge do not
// cut the strober off) and its side channel's URL.
type StrobeTarget struct {
	NetNS string
	URL   string
}

// StrobeConfig configures a clock strober.
type StrobeConfig struct {
	Targets []StrobeTarget
	Offset  time.Duration
	Period  time.Duration
	// Ready, if set, is called once every target answered.
	Ready func()
}

// RunStrobe switches each target's clock skew between Offset and 0 every
// Period until ctx ends, then sets it to 0 and returns. A target that does
// not answer (a killed or paused broker) is retried on the next switch; the
// first switch must reach every target.
func RunStrobe(ctx context.Context, cfg StrobeConfig) error {
	clients := make([]*clusterapi.Client, len(cfg.Targets))
	for i, t := range cfg.Targets {
		dial := compose.NetNSDialer(t.NetNS)
		clients[i] = &clusterapi.Client{Base: t.URL, HTTP: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return dial(ctx, network, addr) },
		}}}
	}
	off := cfg.Offset.Milliseconds()
	set := func(ctx context.Context, skew int64) error {
		var errs []error
		for _, c := range clients {
			if _, err := c.SetClock(ctx, skew); err != nil {
				errs = append(errs, fmt.Errorf("strobe %s: %w", c.Base, err))
			}
		}
		return errors.Join(errs...)
	}
	if err := set(ctx, off); err != nil {
		set(context.WithoutCancel(ctx), 0) //nolint:errcheck // best effort: heal sets 0 too
		return err
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	tick := time.NewTicker(cfg.Period)
	defer tick.Stop()
	on := true
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return set(rctx, 0)
		case <-tick.C:
		}
		on = !on
		skew := int64(0)
		if on {
			skew = off
		}
		// Not cancelled with ctx: a switch cut off mid-request could
		// still reach the broker after the final 0 (it comes on another
		// connection) and leave it skewed. The client's timeout bounds it.
		set(context.WithoutCancel(ctx), skew) //nolint:errcheck // a broker that is down now is switched on the next tick
	}
}

// StrobeMain runs a strober from its arguments (after StrobeArg):
// --offset D --period P --target NETNS=URL ... --run RUN. It prints "ready"
// on stdout once every target's clock moved, and strobes until ctx ends.
func StrobeMain(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("strobe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg StrobeConfig
	fs.DurationVar(&cfg.Offset, "offset", 0, "skew when on")
	fs.DurationVar(&cfg.Period, "period", 0, "time between switches")
	fs.Func("target", "NETNS=URL of a broker's side channel", func(s string) error {
		ns, url, ok := strings.Cut(s, "=")
		if !ok || ns == "" || !strings.HasPrefix(url, "http://") {
			return fmt.Errorf("target %q: want NETNS=http://HOST:PORT", s)
		}
		cfg.Targets = append(cfg.Targets, StrobeTarget{NetNS: ns, URL: url})
		return nil
	})
	fs.String("run", "", "run id (names the process for clean)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: strobe: %v", ErrBadFault, err)
	}
	if cfg.Offset == 0 || cfg.Period < minStrobePeriod || len(cfg.Targets) == 0 {
		return fmt.Errorf("%w: strobe needs --offset, --period of at least %v and a --target", ErrBadFault, minStrobePeriod)
	}
	cfg.Ready = func() { fmt.Fprintln(stdout, "ready") }
	return RunStrobe(ctx, cfg)
}
