package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// QuorumNode configures the controller of one controller quorum node in
// KRaft mode (kafka.profile 4.0): a coordinator member that also runs a
// controller candidate. The active controller is the candidate that won
// the coordinators' election, not a broker, as KRaft's active controller
// is the quorum's Raft leader (etcd's Raft stands in for KRaft's).
type QuorumNode struct {
	// ID is the controller's node id (a node.id distinct from every
	// broker's), as it appears in controller.quorum.voters.
	ID int32
	// Listen is the controller listener, host:port.
	Listen string
	// Endpoints are the coordinator client URLs the controller writes
	// through (its own member's: a member cut from the others' majority
	// cannot keep its leadership, as a KRaft leader cut from its voters
	// cannot).
	Endpoints []string
	// Broker is the cluster's broker configuration the controller reads
	// (unclean.leader.election.enable, min.insync.replicas,
	// eligible.leader.replicas.enable, broker.session.timeout.ms, ...).
	Broker *kafkaconfig.Config
	// ElectionTimeout bounds how long a dead active controller's
	// candidacy outlives it (its lease); default 3 s.
	ElectionTimeout time.Duration
	Logger          *slog.Logger
}

// RunQuorumNode serves the controller listener and campaigns for the
// active controller until ctx ends, running a controller term whenever it
// wins.
func RunQuorumNode(ctx context.Context, q QuorumNode) error {
	if q.ElectionTimeout <= 0 {
		q.ElectionTimeout = 3 * time.Second
	}
	log := q.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", q.Listen)
	if err != nil {
		return fmt.Errorf("controller listener: %w", err)
	}
	cli, err := coord.Dial(ctx, q.Endpoints, coord.WithSessionTimeout(q.ElectionTimeout), coord.WithLogger(log), coord.WithoutConnectCheck())
	if err != nil {
		ln.Close()
		return fmt.Errorf("controller %d: coordinator: %w", q.ID, err)
	}
	defer cli.Close()
	ctrl := New(Config{
		BrokerID: q.ID, Coord: cli, Broker: q.Broker, Logger: log.With("component", "controller"),
		KRaft: true, BrokerSessionTimeout: time.Duration(q.Broker.Long("broker.session.timeout.ms")) * time.Millisecond,
	})
	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(ctx, ln) }()
	log.Info("controller quorum node ready", "node_id", q.ID, "controller_listener", ln.Addr().String())
	for ctx.Err() == nil {
		l, err := cli.Campaign(ctx, q.ID)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			log.Warn("controller campaign", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		log.Info("elected active controller", "node_id", q.ID, "controller_epoch", l.Epoch())
		if err := ctrl.Run(ctx, l); err != nil && ctx.Err() == nil && !errors.Is(err, coord.ErrNotController) {
			log.Warn("controller stopped", "err", err)
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l.Resign(rctx)
		cancel()
	}
	return <-served
}
