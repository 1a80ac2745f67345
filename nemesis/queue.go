package nemesis

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"

	"github.com/isrlab/isrlab/compose"
)

// DelayerSubcommand is how the isrlab binary runs the nemesis's helper
// processes: isrlab fault delayer ARGS runs a packet delayer, isrlab fault
// delayer strobe ARGS a clock strober (see DelayerMain).
var DelayerSubcommand = []string{"fault", "delayer"}

// delayerCommand returns the command that runs a delayer with args.
func (e *Env) delayerCommand(args []string) (*exec.Cmd, error) {
	if e.DelayerCommand != nil {
		return e.DelayerCommand(args), nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the isrlab binary for the delayer: %w", err)
	}
	return exec.Command(exe, append(append([]string(nil), DelayerSubcommand...), args...)...), nil
}

// startHelper starts a helper process of the nemesis (a packet delayer, a
// clock strober: the `fault delayer` subcommand with args) in the run's
// switch namespace and waits until it prints "ready". It lives beyond the
// process that started it (its own session) and goes with the run: the
// backend's teardown kills every process in the run's namespaces, and
// Clean stops the ones in the switch namespace. It returns the process's
// pid and start time, set even when it failed to get ready, so that a heal
// stops it.
func startHelper(ctx context.Context, env *Env, args []string) (int, uint64, error) {
	sw, err := env.switchNS()
	if err != nil {
		return 0, 0, err
	}
	return startHelperIn(ctx, env, sw, args)
}

// startHelperIn starts a helper process in the namespace at path (a node's,
// for node-side faults), as startHelper does.
func startHelperIn(ctx context.Context, env *Env, path string, args []string) (int, uint64, error) {
	cmd, err := env.delayerCommand(args)
	if err != nil {
		return 0, 0, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives `isrlab fault inject`
	if err := compose.InNetNS(path, cmd.Start); err != nil {
		return 0, 0, fmt.Errorf("start %s: %w", helperName(args), err)
	}
	pid, start := cmd.Process.Pid, compose.Identify(cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it whoever ends it
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("it said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			return pid, start, fmt.Errorf("%s: %w", helperName(args), errors.Join(err, <-exited))
		}
	case <-time.After(10 * time.Second):
		return pid, start, fmt.Errorf("%s: not ready after 10s", helperName(args))
	case <-ctx.Done():
		return pid, start, ctx.Err()
	}
	return pid, start, nil
}

func helperName(args []string) string {
	if len(args) > 0 && args[0] == StrobeArg {
		return "strober"
	}
	return "delayer"
}

// queueNum maps a fault id to an NFQUEUE number (queues are per switch
// namespace, so per run).
func queueNum(id string) uint16 {
	if n, err := strconv.Atoi(strings.TrimPrefix(id, "f")); err == nil && n > 0 && n < 1<<16 {
		return uint16(n)
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return uint16(h.Sum32()%(1<<16-1)) + 1
}

// DelayerArgs are the arguments of a delayer process for run.
func DelayerArgs(cfg DelayerConfig, run string) []string {
	args := []string{"--netns", cfg.NetNS, "--queue", strconv.Itoa(int(cfg.Queue)),
		"--delay", cfg.Delay.String(), "--jitter", cfg.Jitter.String(),
		"--seed", strconv.FormatInt(cfg.Seed, 10), "--run", run}
	p := cfg.Packet
	prob := func(flag string, v float64) {
		if v > 0 {
			args = append(args, flag, strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	prob("--duplicate", p.Duplicate)
	prob("--reorder", p.Reorder)
	prob("--corrupt", p.Corrupt)
	prob("--correlation", p.Correlation)
	if p.Gap > 0 {
		args = append(args, "--gap", p.Gap.String())
	}
	if p.FixChecksum {
		args = append(args, "--fix-checksum")
	}
	if p.DupMark != 0 {
		args = append(args, "--dup-mark", strconv.FormatUint(uint64(p.DupMark), 10))
	}
	for _, a := range slices.SortedFunc(maps.Keys(p.MACs), netip.Addr.Compare) {
		args = append(args, "--mac", a.String()+"="+p.MACs[a].String())
	}
	return args
}

// DelayerMain runs a helper process from its arguments: a packet delayer,
// or with StrobeArg first a clock strober (StrobeMain). A delayer prints
// "ready" on stdout once the queue is bound and serves until ctx ends.
func DelayerMain(ctx context.Context, args []string, stdout io.Writer) error {
	nameDelayer()
	if len(args) > 0 && args[0] == StrobeArg {
		return StrobeMain(ctx, args[1:], stdout)
	}
	fs := flag.NewFlagSet("delayer", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg DelayerConfig
	var queue uint
	fs.StringVar(&cfg.NetNS, "netns", "", "namespace of the queue")
	fs.UintVar(&queue, "queue", 0, "queue number")
	fs.DurationVar(&cfg.Delay, "delay", 0, "delay")
	fs.DurationVar(&cfg.Jitter, "jitter", 0, "jitter")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed")
	fs.String("run", "", "run id (names the process for clean)")
	p := &cfg.Packet
	fs.Float64Var(&p.Duplicate, "duplicate", 0, "probability a packet is duplicated")
	fs.Float64Var(&p.Reorder, "reorder", 0, "probability a packet is held back --gap")
	fs.DurationVar(&p.Gap, "gap", 0, "how long a reordered packet is held back")
	fs.Float64Var(&p.Corrupt, "corrupt", 0, "probability a bit of a packet's payload is flipped")
	fs.BoolVar(&p.FixChecksum, "fix-checksum", false, "compute a corrupted packet's checksum again")
	fs.Float64Var(&p.Correlation, "correlation", 0, "how much each draw leans on the previous one")
	fs.Func("dup-mark", "send duplicates through a raw IPv4 socket marking them so (node side)", func(s string) error {
		v, err := strconv.ParseUint(s, 0, 32)
		p.DupMark = uint32(v)
		return err
	})
	fs.Func("mac", "IP=MAC of a node (where duplicates to it are addressed)", func(s string) error {
		ip, mac, ok := strings.Cut(s, "=")
		a, err := netip.ParseAddr(ip)
		hw, herr := net.ParseMAC(mac)
		if !ok || err != nil || herr != nil {
			return fmt.Errorf("--mac %q: want IP=MAC", s)
		}
		if p.MACs == nil {
			p.MACs = map[netip.Addr]net.HardwareAddr{}
		}
		p.MACs[a] = hw
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: delayer: %v", ErrBadFault, err)
	}
	if cfg.NetNS == "" || queue == 0 || queue >= 1<<16 {
		return fmt.Errorf("%w: delayer needs --netns and --queue in [1, 65535]", ErrBadFault)
	}
	for _, v := range []float64{p.Duplicate, p.Reorder, p.Corrupt, p.Correlation} {
		if v < 0 || v > 1 {
			return fmt.Errorf("%w: delayer: probabilities are in [0, 1]", ErrBadFault)
		}
	}
	cfg.Queue = uint16(queue)
	cfg.Ready = func() { fmt.Fprintln(stdout, "ready") }
	return RunDelayer(ctx, cfg)
}

// injectQueue starts the delayer(s) for the fault's queue, then steers the
// nodes' packets to them.
func (s *slowNetRun) injectQueue(ctx context.Context, env *Env) error {
	cfg := DelayerConfig{Delay: time.Duration(s.Delay), Jitter: time.Duration(s.Jitter), Seed: env.rng().Int63()}
	return s.steer(ctx, env, s.Kind(), cfg, s.Resolved, s.Direction)
}

// healQueue stops steering packets, then stops the delayer(s), which
// release what they hold.
func (s *slowNetRun) healQueue(ctx context.Context, env *Env) error {
	return s.unsteer(ctx, env, s.Resolved)
}

// steerToQueue starts a delayer serving cfg's queue, then steers the
// packets to (direction in), from (out) or to and from (both, "") the
// nodes through an nftables table in the switch namespace's IPv4 forward
// hook. The rules bypass the queue when no delayer listens, so a dead
// delayer never cuts a link. It returns the delayer's pid and start time,
// set even on failure, for the heal.
func steerToQueue(ctx context.Context, env *Env, kind string, cfg DelayerConfig, table string, nodes []string, direction string) (int, uint64, error) {
	pid, start, err := startHelper(ctx, env, DelayerArgs(cfg, env.runID()))
	if err != nil {
		return pid, start, err
	}
	nft, done, err := env.nft()
	if err != nil {
		return pid, start, err
	}
	defer done()
	if err := bridgeCallsIPTables(env.Cluster.SwitchNS); err != nil {
		return pid, start, err
	}
	t, ch := ipTable(nft, table)
	for _, name := range nodes {
		n, err := env.node(name)
		if err != nil {
			return pid, start, err
		}
		q := nfqueueTarget(cfg.Queue)
		if direction != "out" {
			nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(matchAddr(false, n.Addr.AsSlice()), q)})
		}
		if direction != "in" {
			nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(matchAddr(true, n.Addr.AsSlice()), q)})
		}
	}
	if err := nft.Flush(); err != nil {
		return pid, start, fmt.Errorf("%s: add nftables queue rules: %w", kind, err)
	}
	return pid, start, nil
}

// unsteer stops steering packets to a delayer's queue (deletes the table),
// then stops the delayer, which releases what it holds.
func unsteer(ctx context.Context, env *Env, table string, pid int, start uint64) error {
	if err := healTable(env, nftables.TableFamilyIPv4, table); err != nil {
		return err
	}
	return stopProcess(ctx, pid, start)
}

// stopProcess sends SIGTERM to pid if it is still the process that started
// at start, and waits until it is gone.
func stopProcess(ctx context.Context, pid int, start uint64) error {
	if pid <= 0 || !compose.Alive(pid, start) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop delayer %d: %w", pid, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for compose.Alive(pid, start) && !zombie(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck
			return fmt.Errorf("delayer %d did not stop after SIGTERM", pid)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// zombie reports whether pid has exited and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// bridgeCallsIPTables turns on br_netfilter's bridge-nf-call-iptables in
// the namespace at path (a per-namespace setting), so that bridged IPv4
// packets pass the IPv4 forward hook where the queue rules are. It is left
// on: nothing else in the switch namespace has IPv4 rules.
func bridgeCallsIPTables(path string) error {
	const knob = "/proc/sys/net/bridge/bridge-nf-call-iptables"
	err := compose.InNetNS(path, func() error { return os.WriteFile(knob, []byte("1\n"), 0o644) })
	if err != nil {
		return fmt.Errorf("%w: enable %s in %s (br_netfilter): %v", ErrUnsupported, knob, path, err)
	}
	return nil
}

// nfqueueTarget is the xtables NFQUEUE target (revision 3, through
// nft_compat: kernels without nft_queue still have it) sending packets to
// queue, bypassing it when no delayer listens.
func nfqueueTarget(queue uint16) expr.Any {
	info := make([]byte, 8) // struct xt_NFQ_info_v3, padded to 8
	binary.NativeEndian.PutUint16(info[0:], queue)
	binary.NativeEndian.PutUint16(info[2:], 1) // queues_total
	binary.NativeEndian.PutUint16(info[4:], 1) // NFQ_FLAG_BYPASS
	raw := xt.Unknown(info)
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &raw}
}

// delayers returns the pids of the processes living in the switch
// namespace at path: only delayers run there.
func delayers(path string) []int { return compose.ProcessesIn(path) }
