package controller

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/internal/scripttest"
)

// scriptCluster is the controller's decision layer without I/O: the state a
// term caches, changed only through the same decisions and plan the term
// uses. Every write gets the next version, as a coordinator revision would.
type scriptCluster struct {
	parts        map[coord.TopicPartition]*partition
	live         map[int32]bool
	shuttingDown map[int32]bool
	unclean      map[string]bool
	elr          elrPolicy
	version      int64
	// KRaft broker lifecycle: registrations (fenced or not) and each
	// broker's last heartbeat, on a clock the script advances.
	registered  map[int32]coord.BrokerInfo
	lastContact map[int32]time.Time
	now         time.Time
}

const scriptControllerEpoch = 9

func (c *scriptCluster) isUp(id int32) bool   { return c.live[id] }
func (c *scriptCluster) isLive(id int32) bool { return c.live[id] && !c.shuttingDown[id] }

func (c *scriptCluster) sorted(filter func(*partition) bool) []*partition {
	var out []*partition
	for _, p := range c.parts {
		if filter == nil || filter(p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *partition) int {
		if a.tp.Topic != b.tp.Topic {
			return strings.Compare(a.tp.Topic, b.tp.Topic)
		}
		return int(a.tp.Partition - b.tp.Partition)
	})
	return out
}

// run applies decide to the partitions and describes the changes.
func (c *scriptCluster) run(parts []*partition, decide decision) string {
	var b strings.Builder
	for _, ch := range plan(parts, decide) {
		c.version++
		ch.New.Version = c.version
		p := c.parts[ch.TP]
		p.state, p.hasState = ch.New, true
		fmt.Fprintf(&b, "%s-%d: ", ch.TP.Topic, ch.TP.Partition)
		if ch.IsNew {
			fmt.Fprintf(&b, "new leader %d epoch %d isr %v", ch.New.Leader, ch.New.LeaderEpoch, ch.New.ISR)
		} else {
			fmt.Fprintf(&b, "leader %d -> %d, epoch %d -> %d, isr %v -> %v", ch.Old.Leader, ch.New.Leader, ch.Old.LeaderEpoch, ch.New.LeaderEpoch, ch.Old.ISR, ch.New.ISR)
		}
		if len(ch.Old.ELR) > 0 || len(ch.New.ELR) > 0 {
			fmt.Fprintf(&b, ", elr %v -> %v", ch.Old.ELR, ch.New.ELR)
		}
		if ch.Unclean {
			b.WriteString(" (unclean)")
		}
		b.WriteString("\n")
	}
	if b.Len() == 0 {
		return "no change\n"
	}
	return b.String()
}

func parseIDs(s string) ([]int32, error) {
	var out []int32
	if s == "" || s == "-" {
		return out, nil
	}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, int32(n))
	}
	return out, nil
}

func parseTP(s string) (coord.TopicPartition, error) {
	i := strings.LastIndex(s, "-")
	if i < 0 {
		return coord.TopicPartition{}, fmt.Errorf("partition %q: want topic-partition", s)
	}
	n, err := strconv.Atoi(s[i+1:])
	return coord.TopicPartition{Topic: s[:i], Partition: int32(n)}, err
}

// exec runs one command line:
//
//	topic T P=R,R,R ...   assignment of a new topic (no state yet)
//	live R,R,...          the live brokers; then the liveness decisions
//	unclean T             unclean election allowed for T; liveness on T
//	preferred [T-P ...]   preferred elections (all partitions by default)
//	rebalance PCT         auto rebalance at leader.imbalance.per.broker.percentage
//	shutdown R            controlled shutdown of R
//	isr T-P R,R,...       the leader changes its ISR itself (no epoch bump)
//	alter T-P R,R,...     the leader's AlterPartition: the ISR changes
//	                      through the controller, with the ELR that follows
//	elr MIN               eligible leader replicas on, min.insync.replicas MIN
//	unclean-restart R     R registers after an unclean shutdown
//	state                 print every partition
func (c *scriptCluster) exec(td *datadriven.TestData) (string, error) {
	w := scripttest.Words(td)
	switch td.Cmd {
	case "topic":
		for _, a := range td.CmdArgs[1:] {
			if len(a.Vals) != 1 {
				return "", fmt.Errorf("assignment %s: want P=R,R", a)
			}
			p, err := strconv.Atoi(a.Key)
			if err != nil {
				return "", err
			}
			replicas, err := parseIDs(a.Vals[0])
			if err != nil {
				return "", err
			}
			tp := coord.TopicPartition{Topic: w[0], Partition: int32(p)}
			c.parts[tp] = &partition{tp: tp, replicas: replicas}
		}
		return "ok\n", nil
	case "live":
		ids, err := parseIDs(w[0])
		if err != nil {
			return "", err
		}
		c.live = map[int32]bool{}
		for _, id := range ids {
			c.live[id] = true
		}
		for id := range c.shuttingDown {
			if !c.live[id] {
				delete(c.shuttingDown, id)
			}
		}
		return c.run(c.sorted(nil), livenessDecision(c.isLive, c.isUp, func(t string) bool { return c.unclean[t] }, c.elr, scriptControllerEpoch)), nil
	case "unclean":
		c.unclean[w[0]] = true
		return c.run(c.sorted(func(p *partition) bool { return p.tp.Topic == w[0] }),
			livenessDecision(c.isLive, c.isUp, func(t string) bool { return c.unclean[t] }, c.elr, scriptControllerEpoch)), nil
	case "preferred":
		want := map[coord.TopicPartition]bool{}
		for _, s := range w {
			tp, err := parseTP(s)
			if err != nil {
				return "", err
			}
			want[tp] = true
		}
		return c.run(c.sorted(func(p *partition) bool { return len(want) == 0 || want[p.tp] }), preferredDecision(c.isLive, scriptControllerEpoch)), nil
	case "rebalance":
		pct, err := strconv.Atoi(w[0])
		if err != nil {
			return "", err
		}
		tps := imbalancedPartitions(c.sorted(nil), pct)
		return c.run(c.sorted(func(p *partition) bool { return slices.Contains(tps, p.tp) }), preferredDecision(c.isLive, scriptControllerEpoch)), nil
	case "register", "heartbeat", "tick":
		return c.lifecycle(td)
	case "shutdown":
		id, err := strconv.Atoi(w[0])
		if err != nil {
			return "", err
		}
		c.shuttingDown[int32(id)] = true
		out := c.run(c.sorted(func(p *partition) bool { return slices.Contains(p.replicas, int32(id)) }),
			shutdownDecision(c.isLive, func(r int32) bool { return c.shuttingDown[r] }, c.elr, scriptControllerEpoch))
		var still []string
		for _, p := range c.sorted(nil) {
			if p.hasState && p.state.Leader == int32(id) {
				still = append(still, fmt.Sprintf("%s-%d", p.tp.Topic, p.tp.Partition))
			}
		}
		return out + fmt.Sprintf("still led by %d: %v\n", id, still), nil
	case "isr":
		tp, err := parseTP(w[0])
		if err != nil {
			return "", err
		}
		isr, err := parseIDs(w[1])
		if err != nil {
			return "", err
		}
		p, ok := c.parts[tp]
		if !ok || !p.hasState {
			return "", fmt.Errorf("no state for %s", w[0])
		}
		c.version++
		p.state.ISR, p.state.Version = isr, c.version
		return "ok\n", nil
	case "alter":
		tp, err := parseTP(w[0])
		if err != nil {
			return "", err
		}
		isr, err := parseIDs(w[1])
		if err != nil {
			return "", err
		}
		p, ok := c.parts[tp]
		if !ok || !p.hasState {
			return "", fmt.Errorf("no state for %s", w[0])
		}
		old := p.state
		c.version++
		p.state.ISR, p.state.ELR, p.state.Version = isr, nil, c.version
		if c.elr.on {
			p.state.ELR = NextELR(toLAI(old), isr, c.elr.minISR(tp.Topic), nil)
		}
		return fmt.Sprintf("%s: isr %v -> %v, elr %v -> %v\n", w[0], old.ISR, p.state.ISR, old.ELR, p.state.ELR), nil
	case "elr":
		n, err := strconv.Atoi(w[0])
		if err != nil {
			return "", err
		}
		c.elr = elrPolicy{on: true, minISR: func(string) int { return n }}
		return "ok\n", nil
	case "unclean-restart":
		id, err := strconv.Atoi(w[0])
		if err != nil {
			return "", err
		}
		return c.run(c.sorted(nil), uncleanShutdownDecision(func(r int32) bool { return r == int32(id) }, scriptControllerEpoch)), nil
	case "state":
		var b strings.Builder
		for _, p := range c.sorted(nil) {
			if !p.hasState {
				fmt.Fprintf(&b, "%s-%d: no state, replicas %v\n", p.tp.Topic, p.tp.Partition, p.replicas)
				continue
			}
			fmt.Fprintf(&b, "%s-%d: leader %d epoch %d isr %v replicas %v", p.tp.Topic, p.tp.Partition, p.state.Leader, p.state.LeaderEpoch, p.state.ISR, p.replicas)
			if len(p.state.ELR) > 0 {
				fmt.Fprintf(&b, " elr %v", p.state.ELR)
			}
			b.WriteString("\n")
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("unknown command %q", td.Cmd)
}

// TestScripts runs the scripts in testdata/scripts (see
// internal/scripttest; -rewrite regenerates the expected outputs).
func TestScripts(t *testing.T) {
	scripttest.RunDir(t, filepath.Join("testdata", "scripts"), func(t *testing.T) func(*testing.T, *datadriven.TestData) string {
		c := &scriptCluster{parts: map[coord.TopicPartition]*partition{}, live: map[int32]bool{},
			shuttingDown: map[int32]bool{}, unclean: map[string]bool{}}
		return func(t *testing.T, td *datadriven.TestData) string {
			out, err := c.exec(td)
			if err != nil {
				t.Fatalf("%s: %v", td.Pos, err)
			}
			return out
		}
	})
}
