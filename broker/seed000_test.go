package broker_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestSeed000Walkthrough replays seed 000's broker-failure walk-through:
// 3 brokers, 4 partitions, RF 3. Broker 3 dies: its leaderships move.
// Broker 1 dies: every leader is on broker 2. Both come back as followers
// and the leaders stay on broker 2 until a preferred election — by hand
// with `isrlab leaders elect`, or by the controller's auto rebalance.
func TestSeed000Walkthrough(t *testing.T) {
	for _, auto := range []bool{false, true} {
		name := "manual-preferred-election"
		if auto {
			name = "auto-rebalance"
		}
		t.Run(name, func(t *testing.T) {
			ov := append([]string{}, fastFailover...)
			if auto {
				ov = append(ov, "auto.leader.rebalance.enable=true", "leader.imbalance.check.interval.seconds=1")
			} else {
				ov = append(ov, "auto.leader.rebalance.enable=false")
			}
			c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: ov})
			c.CreateTopic("seed", 4, 3, nil)
			st, _ := c.Describe("seed")
			preferred := map[int32]int32{}
			for p, s := range st {
				preferred[p] = s.Replicas[0]
				if s.Leader != s.Replicas[0] {
					t.Fatalf("partition %d starts led by %d, not its preferred replica %d", p, s.Leader, s.Replicas[0])
				}
			}
			waitLeaders := func(what string, ok func(map[int32]proctest.PartitionState) error) {
				t.Helper()
				proctest.Eventually(t, 40*time.Second, what, func() error {
					s, err := c.Describe("seed")
					if err != nil {
						return err
					}
					return ok(s)
				})
			}
			c.Brokers[3].Kill()
			waitLeaders("broker 3 leads nothing", func(s map[int32]proctest.PartitionState) error {
				for p, ps := range s {
					if ps.Leader == 3 || ps.Leader < 0 {
						return fmt.Errorf("partition %d leader %d", p, ps.Leader)
					}
				}
				return nil
			})
			c.Brokers[1].Kill()
			waitLeaders("every leader on broker 2", func(s map[int32]proctest.PartitionState) error {
				for p, ps := range s {
					if ps.Leader != 2 {
						return fmt.Errorf("partition %d leader %d", p, ps.Leader)
					}
				}
				return nil
			})
			c.Brokers[1].Restart()
			c.Brokers[3].Restart()
			if !auto {
				waitLeaders("brokers 1 and 3 back in every ISR, leaders still on broker 2", func(s map[int32]proctest.PartitionState) error {
					for p, ps := range s {
						if len(ps.ISR) != 3 {
							return fmt.Errorf("partition %d isr %v", p, ps.ISR)
						}
						if ps.Leader != 2 {
							return fmt.Errorf("partition %d moved to %d without a preferred election", p, ps.Leader)
						}
					}
					return nil
				})
				out, err := exec.Command(proctest.Binary(t), "leaders", "elect", "--bootstrap-server", strings.Join(c.Bootstrap(), ","),
					"--election-type", "preferred", "--all-topic-partitions").CombinedOutput()
				if err != nil {
					t.Fatalf("isrlab leaders elect: %v\n%s", err, out)
				}
				t.Logf("isrlab leaders elect:\n%s", out)
			}
			waitLeaders("preferred leaders restored", func(s map[int32]proctest.PartitionState) error {
				for p, ps := range s {
					if ps.Leader != preferred[p] {
						return fmt.Errorf("partition %d leader %d, preferred %d", p, ps.Leader, preferred[p])
					}
				}
				return nil
			})
		})
	}
}
