package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Partition reassignment (KIP-455) belongs to the controller, as in
// ZooKeeper-era Kafka from 2.4: any other broker answers NOT_CONTROLLER,
// which clients retry against the controller named in the metadata. The
// controller's steps are in broker/controller/reassign.go.

var _ = serve(45, "AlterPartitionReassignments", 0, 0, (*Broker).handleAlterPartitionReassignments, notIn("0.10"))

func (b *Broker) handleAlterPartitionReassignments(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.AlterPartitionAssignmentsRequest)
	c := b.activeController()
	if c == nil {
		resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
		resp.ErrorCode = kerr.NotController.Code
		rq.respond(resp)
		return
	}
	go func() { rq.respond(c.AlterPartitionReassignments(ctx, req)) }()
}

var _ = serve(46, "ListPartitionReassignments", 0, 0, (*Broker).handleListPartitionReassignments, notIn("0.10"))

func (b *Broker) handleListPartitionReassignments(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.ListPartitionReassignmentsRequest)
	c := b.activeController()
	if c == nil {
		resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
		resp.ErrorCode = kerr.NotController.Code
		rq.respond(resp)
		return
	}
	go func() { rq.respond(c.ListPartitionReassignments(ctx, req)) }()
}
