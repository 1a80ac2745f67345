package nemesis

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/isrlab/isrlab/compose"
)

// Network and clock faults on nodes that live on other machines (the ssh
// backend): the node's Remote runs nft (iptables where nft is missing), tc
// and date on its host. Every multi-step command is a fixed sh script
// whose inputs are positional parameters. Everything carries the run id:
// the nftables table or iptables chains are named after the fault's table
// (isrlab-<run>-<fault>), a clock skew leaves a marker file naming run,
// fault and node until it is undone, so heal and CleanRemote find exactly
// what the run added, even after the lab was killed. The SSH port the
// lab's connection comes in on is always let through, so that a fault can
// always be healed.

// remoteHost is what a node's Remote tells about its host, when it can
// (compose/ssh's Host does).
type remoteHost interface {
	ControlPort() int     // the SSH port faults must not cut
	SystemClock() bool    // clock-skew may set the system clock
	FirewallTool() string // "nft", "iptables" or "" (nft where present)
}

func controlPort(r compose.Commander) int {
	if h, ok := r.(remoteHost); ok && h.ControlPort() > 0 {
		return h.ControlPort()
	}
	return 22
}

// firewallTool is the tool the node's host is set to use ("" for nft
// where the host has it, else iptables).
func firewallTool(n *compose.Node) string {
	if h, ok := n.Remote.(remoteHost); ok {
		return h.FirewallTool()
	}
	return ""
}

// firewallPrelude picks the tool on the host in the same session as the
// rules: $1 is nft, iptables or empty (nft where present); with nft the
// ruleset on standard input is loaded and the rest is not run. Exit 127
// means the host has neither tool.
const firewallPrelude = `fw=$1
shift
if [ "$fw" != iptables ] && command -v nft >/dev/null 2>&1; then exec nft -f -; fi
if [ "$fw" = nft ]; then echo "nft: not found" >&2; exit 127; fi
command -v iptables >/dev/null 2>&1 || { echo "neither nft nor iptables" >&2; exit 127; }
`

// firewallError turns exit 127 of a firewall script into ErrUnsupported.
func firewallError(n *compose.Node, what string, err error) error {
	var ee *compose.ExitError
	if errors.As(err, &ee) && ee.Status == 127 {
		return fmt.Errorf("%w: %s on %s: %v", ErrUnsupported, what, n.Name, err)
	}
	return fmt.Errorf("%s on %s: %w", what, n.Name, err)
}

// nftRuleset is one table with the chains given, each accepting the SSH
// control port first.
func nftRuleset(table string, port int, input, output []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", table)
	if len(input) > 0 {
		fmt.Fprintf(&b, "\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n\t\ttcp dport %d accept\n", port)
		for _, r := range input {
			fmt.Fprintf(&b, "\t\t%s\n", r)
		}
		b.WriteString("\t}\n")
	}
	if len(output) > 0 {
		fmt.Fprintf(&b, "\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n\t\ttcp sport %d accept\n", port)
		for _, r := range output {
			fmt.Fprintf(&b, "\t\t%s\n", r)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// nftDropFrom is the nft rules dropping packets from addrs.
func nftDropFrom(addrs []netip.Addr) []string {
	var v4, v6 []string
	for _, a := range addrs {
		if a.Is4() {
			v4 = append(v4, a.String())
		} else {
			v6 = append(v6, a.String())
		}
	}
	var out []string
	if len(v4) > 0 {
		out = append(out, "ip saddr { "+strings.Join(v4, ", ")+" } drop")
	}
	if len(v6) > 0 {
		out = append(out, "ip6 saddr { "+strings.Join(v6, ", ")+" } drop")
	}
	return out
}

// iptablesDropScript (after the prelude) adds chain $1, letting TCP to
// port $2 through and dropping packets from $3..., and jumps to it first
// from INPUT.
const iptablesDropScript = firewallPrelude + `set -e
c=$1 port=$2
shift 2
iptables -w -N "$c"
iptables -w -A "$c" -p tcp --dport "$port" -j RETURN
for a in "$@"; do iptables -w -A "$c" -s "$a" -j DROP; done
iptables -w -I INPUT 1 -j "$c"`

// iptablesLossScript (after the prelude) adds chain $1-in (from INPUT)
// and/or $1-out (to OUTPUT), per direction $4, each letting the SSH port
// $2 through and dropping packets with probability $3.
const iptablesLossScript = firewallPrelude + `set -e
c=$1 port=$2 p=$3 dir=$4
if [ "$dir" != out ]; then
	iptables -w -N "$c-in"
	iptables -w -A "$c-in" -p tcp --dport "$port" -j RETURN
	iptables -w -A "$c-in" -m statistic --mode random --probability "$p" -j DROP
	iptables -w -I INPUT 1 -j "$c-in"
fi
if [ "$dir" != in ]; then
	iptables -w -N "$c-out"
	iptables -w -A "$c-out" -p tcp --sport "$port" -j RETURN
	iptables -w -A "$c-out" -m statistic --mode random --probability "$p" -j DROP
	iptables -w -I OUTPUT 1 -j "$c-out"
fi`

// removeTablesScript removes the nftables table and iptables chains named
// $2... (of run $1's faults, or every table of the run if $2 is absent).
// Missing ones are skipped, so it is safe twice and after a half-done
// inject.
const removeTablesScript = `run=$1
shift
if command -v nft >/dev/null 2>&1; then
	nft list tables 2>/dev/null | while read -r _ fam name; do
		case $name in "isrlab-$run-"*) ;; *) continue ;; esac
		if [ $# -gt 0 ]; then
			hit=
			for t in "$@"; do [ "$name" = "$t" ] && hit=1; done
			[ -n "$hit" ] || continue
		fi
		nft delete table "$fam" "$name" || exit 1
	done || exit 1
fi
if command -v iptables >/dev/null 2>&1; then
	for c in $(iptables -w -S 2>/dev/null | sed -n "s/^-N \(isrlab-$run-[^ ]*\)$/\1/p"); do
		if [ $# -gt 0 ]; then
			hit=
			for t in "$@"; do [ "$c" = "$t-in" ] || [ "$c" = "$t-out" ] && hit=1; done
			[ -n "$hit" ] || continue
		fi
		while iptables -w -D INPUT -j "$c" 2>/dev/null; do :; done
		while iptables -w -D OUTPUT -j "$c" 2>/dev/null; do :; done
		iptables -w -F "$c"
		iptables -w -X "$c"
	done
fi`

var runIDRE = regexp.MustCompile(`^[a-z0-9-]+$`)

// remoteDropFrom cuts, on n's host, every packet from the nodes froms.
func remoteDropFrom(ctx context.Context, env *Env, n *compose.Node, table string, froms []string) error {
	var addrs []netip.Addr
	for _, name := range froms {
		f, err := env.node(name)
		if err != nil {
			return err
		}
		addrs = append(addrs, f.Addr)
	}
	fw := firewallTool(n)
	port := controlPort(n.Remote)
	args := []string{"sh", "-c", iptablesDropScript, "sh", fw, table + "-in", strconv.Itoa(port)}
	for _, a := range addrs {
		if !a.Is4() && fw == "iptables" {
			return fmt.Errorf("%w: iptables on %s: %s is not IPv4", ErrUnsupported, n.Name, a)
		}
		args = append(args, a.String())
	}
	if _, err := n.Remote.Command(ctx, args, []byte(nftRuleset(table, port, nftDropFrom(addrs), nil))); err != nil {
		return firewallError(n, "partition", err)
	}
	return nil
}

// remoteLoss drops pct % of n's packets per direction.
func remoteLoss(ctx context.Context, n *compose.Node, table string, pct float64, dir string) error {
	port := controlPort(n.Remote)
	rule := "drop"
	if th := int(pct / 100 * lossScale); th < lossScale {
		rule = fmt.Sprintf("numgen random mod %d < %d drop", lossScale, th)
	}
	var in, out []string
	if dir != "out" {
		in = []string{rule}
	}
	if dir != "in" {
		out = []string{rule}
	}
	if dir == "" {
		dir = "both"
	}
	p := strconv.FormatFloat(pct/100, 'f', 4, 64)
	argv := []string{"sh", "-c", iptablesLossScript, "sh", firewallTool(n), table, strconv.Itoa(port), p, dir}
	if _, err := n.Remote.Command(ctx, argv, []byte(nftRuleset(table, port, in, out))); err != nil {
		return firewallError(n, "loss", err)
	}
	return nil
}

// remoteRemoveTables removes tables (all of run's when none is given) on
// n's host.
func remoteRemoveTables(ctx context.Context, n *compose.Node, run string, tables ...string) error {
	if !runIDRE.MatchString(run) {
		return fmt.Errorf("%w: run id %q", ErrBadFault, run)
	}
	argv := append([]string{"sh", "-c", removeTablesScript, "sh", run}, tables...)
	if _, err := n.Remote.Command(ctx, argv, nil); err != nil {
		return fmt.Errorf("remove fault rules on %s: %w", n.Name, err)
	}
	return nil
}

// RemoteTables lists the nftables tables and iptables chains of run on
// the node's host (every run's with run == ""): what a test checks is gone.
func RemoteTables(ctx context.Context, n *compose.Node, run string) ([]string, error) {
	out, err := n.Remote.Command(ctx, []string{"sh", "-c", `{ nft list tables 2>/dev/null; iptables -w -S 2>/dev/null; } | grep -o "isrlab-$1[^ ]*" || true`, "sh", run}, nil)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// qdiscScript replaces the root qdisc of device $1 with handle 1517: and
// the qdisc $2 $3...
const qdiscScript = `dev=$1
shift
exec tc qdisc replace dev "$dev" root handle 1517: "$@"`

// delQdiscScript removes the root qdisc of device $1 if it is a fault's.
const delQdiscScript = `dev=$1
if tc qdisc show dev "$dev" root 2>/dev/null | grep -q '^qdisc [^ ]* 1517: '; then
	tc qdisc del dev "$dev" root
fi`

// remoteIface is the interface slow-net shapes on n's host: the node's
// Iface, else the one holding its address.
func remoteIface(ctx context.Context, n *compose.Node) (string, error) {
	if n.Iface != "" {
		return n.Iface, nil
	}
	out, err := n.Remote.Command(ctx, []string{"ip", "-o", "addr", "show", "to", n.Addr.String()}, nil)
	if err != nil {
		return "", fmt.Errorf("find the interface of %s on %s: %w", n.Addr, n.Name, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return "", fmt.Errorf("%w: no interface holds %s on %s (give the node an iface)", ErrUnsupported, n.Addr, n.Name)
	}
	dev, _, _ := strings.Cut(f[1], "@")
	return dev, nil
}

// tcRate is a rate in tc's syntax (bytes per second -> bit).
func tcRate(bytesPerSec uint64) string { return strconv.FormatUint(bytesPerSec*8, 10) + "bit" }

func tcDur(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) + "us" }

// errNoNetem: the host's kernel has no netem for a delay.
var errNoNetem = errors.New("no netem")

// remoteShape applies s's rate, and its delay if delay is set, to what n
// sends: netem where the host's kernel has it (errNoNetem for a delay
// where it does not); a rate alone falls back to TBF.
func (s *slowNetRun) remoteShape(ctx context.Context, n *compose.Node, rate uint64, delay bool) (mode string, err error) {
	if rate == 0 && !delay {
		return "", nil
	}
	dev, err := remoteIface(ctx, n)
	if err != nil {
		return "", err
	}
	netem := []string{dev, "netem", "limit", "10000"}
	if delay {
		netem = append(netem, "delay", tcDur(time.Duration(s.Delay)))
		if s.Jitter > 0 {
			netem = append(netem, tcDur(time.Duration(s.Jitter)))
		}
	}
	if rate > 0 {
		netem = append(netem, "rate", tcRate(rate))
	}
	_, err = n.Remote.Command(ctx, append([]string{"sh", "-c", qdiscScript, "sh"}, netem...), nil)
	if err == nil {
		return "netem", nil
	}
	var ee *compose.ExitError
	if !errors.As(err, &ee) {
		return "", fmt.Errorf("slow-net on %s: %w", n.Name, err)
	}
	if delay {
		return "", fmt.Errorf("%w: slow-net delay on %s: %v", errNoNetem, n.Name, err)
	}
	burst := max(rate/100, 3*1514)
	limit := max(rate/10, 2*burst)
	tbf := []string{dev, "tbf", "rate", tcRate(rate), "burst", strconv.FormatUint(burst, 10), "limit", strconv.FormatUint(limit, 10)}
	if _, err := n.Remote.Command(ctx, append([]string{"sh", "-c", qdiscScript, "sh"}, tbf...), nil); err != nil {
		return "", fmt.Errorf("slow-net on %s: %w", n.Name, err)
	}
	return "tbf", nil
}

func remoteUnshape(ctx context.Context, n *compose.Node) error {
	dev, err := remoteIface(ctx, n)
	if err != nil {
		return err
	}
	if _, err := n.Remote.Command(ctx, []string{"sh", "-c", delQdiscScript, "sh", dev}, nil); err != nil {
		return fmt.Errorf("heal slow-net on %s: %w", n.Name, err)
	}
	return nil
}

// Clock skew on a host's system clock. The marker file records the offset
// before the clock moves, so that undoing is idempotent (only a marker is
// undone, and it goes with the undo) and possible after a crash.

// clockSkewScript moves the clock by $2 ms, recording it in marker $1.
const clockSkewScript = `m=$1 off=$2
[ ! -e "$m" ] || exit 0
echo "$off" >"$m" || exit 1
now=$(date +%s%N)
t=$((now + off * 1000000))
if ! date -s "@$((t / 1000000000)).$(printf %09d $((t % 1000000000)))" >/dev/null; then
	rm -f -- "$m"
	exit 1
fi`

// clockUndoScript moves the clock back by the offset in each marker named
// (a glob of markers with $1 = "glob" and the pattern in $2).
const clockUndoScript = `undo() {
	[ -e "$1" ] || return 0
	off=$(cat -- "$1") || return 1
	now=$(date +%s%N)
	t=$((now - off * 1000000))
	date -s "@$((t / 1000000000)).$(printf %09d $((t % 1000000000)))" >/dev/null || return 1
	rm -f -- "$1"
}
if [ "$1" = glob ]; then
	for m in $2; do undo "$m" || exit 1; done
else
	undo "$2"
fi`

// clockMarker names the marker of fault table on node.
func clockMarker(table, node string) string { return "/tmp/" + table + "-" + node + ".clock" }

// systemClock reports whether clock faults set n's host clock.
func systemClock(n *compose.Node) bool {
	h, ok := n.Remote.(remoteHost)
	return ok && h.SystemClock()
}

// CleanRemote removes what faults of c's run left on the hosts of its
// remote nodes: every nftables table and iptables chain named after the
// run, every clock skew still marked (its offset undone), and every fault
// of the faultfs daemons behind the brokers' data dirs (healed). Faults in
// a store are healed by Nemesis.HealAll first; this catches the rest.
// Nodes on this machine are left to Clean.
func CleanRemote(ctx context.Context, c *compose.Cluster) error {
	env := &Env{Cluster: c}
	disks := c.Disks()
	return eachRemote(env, names(c.Nodes), func(n *compose.Node) error {
		err := errors.Join(remoteRemoveTables(ctx, n, c.RunID), remoteStopDelayers(ctx, n, c.RunID), undoClockSkews(ctx, n, c.RunID))
		if s := disks[n.Name]; s != "" {
			err = errors.Join(err, healRemoteDisk(ctx, env, n.Name, s))
		}
		return err
	})
}

// healRemoteDisk heals every fault of the faultfs daemon behind node's
// data dir, on its host.
func healRemoteDisk(ctx context.Context, env *Env, node, socket string) error {
	c, err := diskClient(env, node, socket)
	if err == nil {
		err = c.Heal(ctx)
	}
	if err != nil {
		return fmt.Errorf("heal the faultfs of %s: %w", node, err)
	}
	return nil
}

// undoClockSkews undoes every clock skew of run still marked on n's host.
func undoClockSkews(ctx context.Context, n *compose.Node, run string) error {
	if !systemClock(n) {
		return nil
	}
	if !runIDRE.MatchString(run) {
		return fmt.Errorf("%w: run id %q", ErrBadFault, run)
	}
	pat := "/tmp/" + TablePrefix + run + "-*-" + n.Name + ".clock"
	if _, err := n.Remote.Command(ctx, []string{"sh", "-c", clockUndoScript, "sh", "glob", pat}, nil); err != nil {
		return fmt.Errorf("undo clock skew on %s: %w", n.Name, err)
	}
	return nil
}
