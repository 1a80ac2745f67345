package coord_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/isrlab/isrlab/broker/coord"
)

// freeURL returns an http URL on a free loopback port.
func freeURL() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// A controller's life: register the broker, win the election, create a
// topic with its initial partition states, then move leadership of a
// partition with a fenced compare-and-swap.
func Example() {
	dir, err := os.MkdirTemp("", "coord-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	srv, err := coord.StartServer(ctx, coord.ServerConfig{
		DataDir: dir, ListenClientURLs: freeURL(), ListenPeerURLs: freeURL(), UnsafeNoFsync: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	c, err := coord.Dial(ctx, srv.ClientURLs())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Broker 1 registers; its epoch is the registration's revision.
	reg, err := c.RegisterBroker(ctx, coord.BrokerInfo{ID: 1, Host: "127.0.0.1", Port: 9092}, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()

	// It becomes controller on the same session.
	l, err := reg.Campaign(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Resign(ctx)

	spec := coord.TopicSpec{Name: "orders", Assignment: map[int32][]int32{0: {1, 2}}}
	initial := map[int32]coord.PartitionState{0: {ControllerEpoch: l.Epoch(), Leader: 1, ISR: []int32{1, 2}}}
	if err := c.CreateTopic(ctx, l, spec, initial); err != nil {
		log.Fatal(err)
	}

	// Elect broker 2: read the state, then write it back conditionally.
	st, err := c.PartitionState(ctx, "orders", 0)
	if err != nil {
		log.Fatal(err)
	}
	next := coord.PartitionState{ControllerEpoch: l.Epoch(), Leader: 2, LeaderEpoch: st.LeaderEpoch + 1, ISR: []int32{2}}
	_, err = c.SetPartitionStates(ctx, l, []coord.PartitionStateUpdate{{Topic: "orders", Partition: 0, State: next, ExpectedVersion: st.Version}})
	if err != nil {
		log.Fatal(err)
	}

	// The same write again carries a stale version and is refused.
	_, err = c.SetPartitionStates(ctx, l, []coord.PartitionStateUpdate{{Topic: "orders", Partition: 0, State: next, ExpectedVersion: st.Version}})
	fmt.Println("stale write refused:", errors.Is(err, coord.ErrVersionMismatch))

	id, epoch, _ := c.Controller(ctx)
	st, _ = c.PartitionState(ctx, "orders", 0)
	fmt.Println("controller:", id, "epoch is the election revision:", epoch == l.Epoch())
	fmt.Println("leader:", st.Leader, "leader epoch:", st.LeaderEpoch, "isr:", st.ISR)

	// A lost session ends the leadership: Done closes.
	reg.Close()
	select {
	case <-l.Done():
		fmt.Println("leadership over")
	case <-time.After(5 * time.Second):
		fmt.Println("leadership still held")
	}
	// Output:
	// stale write refused: true
	// controller: 1 epoch is the election revision: true
	// leader: 2 leader epoch: 1 isr: [2]
	// leadership over
}
