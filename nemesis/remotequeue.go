package nemesis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/isrlab/isrlab/compose"
)

// Packet faults and delays on nodes that live on other machines (the ssh
// backend): the node's host runs `isrlab fault delayer` (its own isrlab,
// Node.Isrlab in the cluster file) in its own namespace, and an nftables
// table (iptables chains where nft is missing) steers the host's IPv4
// packets to its queue, leaving loopback, the delayer's own copies and the
// lab's SSH port alone. The delayer's pid and output sit in files named
// after the fault's table and the node (/tmp/isrlab-<run>-<fault>-<node>.delayer.pid
// and .out), so a heal or CleanRemote finds it after the lab was killed.

// helperHost is a remote host that can run the isrlab binary (compose/ssh's
// Host).
type helperHost interface {
	IsrlabCommand() []string
}

func isrlabOn(n *compose.Node) []string {
	if h, ok := n.Remote.(helperHost); ok {
		return h.IsrlabCommand()
	}
	return []string{"isrlab"}
}

// remoteQueueBase keeps the remote delayers' queues away from the low
// numbers other tools on a user's host are likelier to use.
const remoteQueueBase = 20000

// delayerFiles is the common name of a remote delayer's pid and output
// files (without the .pid and .out suffixes).
func delayerFiles(table, node string) string { return "/tmp/" + table + "-" + node + ".delayer" }

// remoteDelayerStartScript starts "$@" (the delayer) detached in its own
// session, its pid in $1.pid and its output in $1.out, and waits until it
// says ready (10 s at most); it prints the pid. A delayer already running
// under $1 is left as it is.
const remoteDelayerStartScript = `f=$1
shift
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
if [ -e "$f.pid" ] && alive "$(cat "$f.pid")"; then cat "$f.pid"; exit 0; fi
command -v setsid >/dev/null 2>&1 || { echo "setsid: not found" >&2; exit 127; }
setsid "$@" </dev/null >"$f.out" 2>&1 &
echo $! >"$f.pid"
i=0
while [ $i -lt 100 ]; do
	if grep -qx ready "$f.out" 2>/dev/null; then cat "$f.pid"; exit 0; fi
	if ! alive "$(cat "$f.pid")"; then cat "$f.out" >&2; rm -f "$f.pid"; exit 1; fi
	sleep 0.1
	i=$((i + 1))
done
echo "the delayer was not ready after 10s" >&2
exit 1`

// remoteDelayerStopScript stops the delayers whose files are named $2...
// (or with $1 = glob, every delayer of run $2), if their pid is still a
// delayer: SIGTERM (it releases what it holds), SIGKILL after 5 s.
const remoteDelayerStopScript = `alive() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
mode=$1
shift
if [ "$mode" = glob ]; then
	run=$1
	shift
	for p in /tmp/isrlab-"$run"-*.delayer.pid; do [ -e "$p" ] && set -- "$@" "${p%.pid}"; done
fi
for f in "$@"; do
	[ -e "$f.pid" ] || continue
	pid=$(cat "$f.pid")
	if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "fault delayer"; then
		kill "$pid" 2>/dev/null
		i=0
		while alive "$pid" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
		alive "$pid" && kill -9 "$pid" 2>/dev/null
	fi
	rm -f "$f.pid" "$f.out"
done
exit 0`

// queueRulesScript steers packets to the queue: with nft (unless $1 is
// iptables) the ruleset on standard input; where nft refuses it (its queue
// statement needs the nft_queue module, which some kernels lack) or is
// missing, iptables chains $2-in (from INPUT) and/or $2-out (to OUTPUT),
// per direction $6, each letting the SSH port $3, loopback and packets
// marked $5 through and sending the rest to queue $4 with the xtables
// NFQUEUE target (bypassed when no delayer listens).
const queueRulesScript = `fw=$1 c=$2 port=$3 q=$4 mark=$5 dir=$6
if [ "$fw" != iptables ] && command -v nft >/dev/null 2>&1; then
	if err=$(nft -f - 2>&1); then exit 0; fi
	if [ "$fw" = nft ] || ! command -v iptables >/dev/null 2>&1; then echo "$err" >&2; exit 1; fi
fi
command -v iptables >/dev/null 2>&1 || { echo "neither nft nor iptables" >&2; exit 127; }
set -e
for d in in out; do
	[ "$dir" = both ] || [ "$dir" = "$d" ] || continue
	if [ "$d" = in ]; then hook=INPUT ports=--dport iface=-i; else hook=OUTPUT ports=--sport iface=-o; fi
	iptables -w -N "$c-$d"
	iptables -w -A "$c-$d" -p tcp "$ports" "$port" -j RETURN
	iptables -w -A "$c-$d" "$iface" lo -j RETURN
	iptables -w -A "$c-$d" -m mark --mark "$mark" -j RETURN
	iptables -w -A "$c-$d" -j NFQUEUE --queue-num "$q" --queue-bypass
	iptables -w -I "$hook" 1 -j "$c-$d"
done`

// remoteSteer starts a delayer serving cfg's queue on n's host and steers
// the host's packets to it. It returns the delayer's pid on the host (0 if
// it did not start).
func remoteSteer(ctx context.Context, n *compose.Node, kind string, cfg DelayerConfig, run, table, direction string) (int, error) {
	cfg.NetNS, cfg.Queue = "/proc/self/ns/net", remoteQueueBase+cfg.Queue%10000
	argv := append([]string{"sh", "-c", remoteDelayerStartScript, "sh", delayerFiles(table, n.Name)}, isrlabOn(n)...)
	argv = append(append(argv, DelayerSubcommand...), DelayerArgs(cfg, run)...)
	out, err := n.Remote.Command(ctx, argv, nil)
	if err != nil {
		var ee *compose.ExitError
		if errors.As(err, &ee) && ee.Status == 127 {
			return 0, fmt.Errorf("%w: %s on %s: %v", ErrUnsupported, kind, n.Name, err)
		}
		return 0, fmt.Errorf("%s on %s: start the delayer (%s): %w", kind, n.Name, strings.Join(isrlabOn(n), " "), err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	port := controlPort(n.Remote)
	q := strconv.Itoa(int(cfg.Queue))
	rule := func(iface string) []string {
		return []string{fmt.Sprintf(`meta nfproto ipv4 %s != "lo" meta mark != %#x queue num %s bypass`, iface, dupMark, q)}
	}
	var in, outRules []string
	if direction != "out" {
		in = rule("iifname")
	}
	if direction != "in" {
		outRules = rule("oifname")
	}
	dir := direction
	if dir == "" {
		dir = "both"
	}
	script := []string{"sh", "-c", queueRulesScript, "sh", firewallTool(n), table, strconv.Itoa(port), q, strconv.Itoa(dupMark), dir}
	if _, err := n.Remote.Command(ctx, script, []byte(nftRuleset(table, port, in, outRules))); err != nil {
		return pid, firewallError(n, kind, err)
	}
	return pid, nil
}

// remoteStopDelayers stops the delayers of files on n's host (every one of
// run's with no files).
func remoteStopDelayers(ctx context.Context, n *compose.Node, run string, files ...string) error {
	argv := []string{"sh", "-c", remoteDelayerStopScript, "sh"}
	if len(files) == 0 {
		if !runIDRE.MatchString(run) {
			return fmt.Errorf("%w: run id %q", ErrBadFault, run)
		}
		argv = append(argv, "glob", run)
	} else {
		argv = append(append(argv, "files"), files...)
	}
	if _, err := n.Remote.Command(ctx, argv, nil); err != nil {
		return fmt.Errorf("stop the delayer on %s: %w", n.Name, err)
	}
	return nil
}
