package controller

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/internal/scripttest"
)

// scriptSessionTimeout is broker.session.timeout.ms in the scripts.
const scriptSessionTimeout = 9 * time.Second

// lifecycle runs the KRaft broker lifecycle commands of the scripts:
//
//	register ID               a broker registers (fenced)
//	heartbeat ID [want-fence] [want-shutdown] [at=SECONDS]
//	tick at=SECONDS           the clock moves; brokers silent for longer
//	                          than the session timeout (9 s) are fenced
//
// Fencing and unfencing change the live set through the same liveness
// decision as the ZooKeeper era's broker changes; a controlled shutdown is
// the shutdown decision, granted once the broker leads nothing.
func (c *scriptCluster) lifecycle(td *datadriven.TestData) (string, error) {
	cmd, w := td.Cmd, scripttest.Words(td)
	for _, a := range td.CmdArgs {
		if a.Key == "at" && len(a.Vals) == 1 {
			w = append(w, "at="+a.Vals[0])
		}
	}
	if c.registered == nil {
		c.registered, c.lastContact = map[int32]coord.BrokerInfo{}, map[int32]time.Time{}
		c.now = time.Unix(0, 0)
	}
	var id int32 = -1
	var wantFence, wantShutdown bool
	for _, a := range w {
		switch {
		case a == "want-fence":
			wantFence = true
		case a == "want-shutdown":
			wantShutdown = true
		case strings.HasPrefix(a, "at="):
			sec, err := strconv.ParseFloat(strings.TrimPrefix(a, "at="), 64)
			if err != nil {
				return "", err
			}
			c.now = time.Unix(0, 0).Add(time.Duration(sec * float64(time.Second)))
		default:
			n, err := strconv.Atoi(a)
			if err != nil {
				return "", fmt.Errorf("%s: unknown argument %q", cmd, a)
			}
			id = int32(n)
		}
	}
	setLive := func(id int32, live bool) string {
		b := c.registered[id]
		b.Fenced = !live
		c.registered[id] = b
		if live {
			c.live[id] = true
		} else {
			delete(c.live, id)
			delete(c.shuttingDown, id)
		}
		return c.run(c.sorted(nil), livenessDecision(c.isLive, c.isUp, func(t string) bool { return c.unclean[t] }, c.elr, scriptControllerEpoch))
	}
	switch cmd {
	case "register":
		c.version++
		c.registered[id] = coord.BrokerInfo{ID: id, Epoch: c.version, Fenced: true}
		c.lastContact[id] = c.now
		return fmt.Sprintf("broker %d registered, epoch %d, fenced\n", id, c.version), nil
	case "heartbeat":
		b, ok := c.registered[id]
		if !ok {
			return "BROKER_ID_NOT_REGISTERED\n", nil
		}
		c.lastContact[id] = c.now
		act := decideHeartbeat(b.Fenced, wantFence, wantShutdown)
		out := act.String() + "\n"
		switch act {
		case hbUnfence:
			out += setLive(id, true)
		case hbFence:
			out += setLive(id, false)
		case hbShutdownNow:
			out += "should shut down\n"
		case hbControlledShutdown:
			c.shuttingDown[id] = true
			out += c.run(c.sorted(func(p *partition) bool { return slices.Contains(p.replicas, id) }),
				shutdownDecision(c.isLive, func(r int32) bool { return c.shuttingDown[r] }, c.elr, scriptControllerEpoch))
			leads := false
			for _, p := range c.sorted(nil) {
				leads = leads || (p.hasState && p.state.Leader == id)
			}
			if leads {
				out += "still leads partitions: keep heartbeating\n"
			} else {
				out += "should shut down; fenced\n" + setLive(id, false)
			}
		}
		return out, nil
	case "tick":
		stale := staleBrokers(c.registered, c.lastContact, c.now, scriptSessionTimeout)
		if len(stale) == 0 {
			return "no broker fenced\n", nil
		}
		out := fmt.Sprintf("fenced %v\n", stale)
		for _, id := range stale {
			out += setLive(id, false)
		}
		return out, nil
	}
	return "", fmt.Errorf("unknown command %s", cmd)
}
