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

var _ = serve(45, "AlterPartitionReassignments", 0, 0, controllerHandler((*controllerAPI).handleAlterPartitionReassignments), notIn("0.10"), k40(0, 0))

func (a *controllerAPI) handleAlterPartitionReassignments(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.AlterPartitionAssignmentsRequest)
	c := a.active()
	if c == nil {
		resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
		resp.ErrorCode = kerr.NotController.Code
		rq.respond(resp)
		return
	}
	go func() { rq.respond(c.AlterPartitionReassignments(ctx, req)) }()
}

var _ = serve(46, "ListPartitionReassignments", 0, 0, controllerHandler((*controllerAPI).handleListPartitionReassignments), notIn("0.10"), k40(0, 0))

func (a *controllerAPI) handleListPartitionReassignments(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.ListPartitionReassignmentsRequest)
	c := a.active()
	if c == nil {
		resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
		resp.ErrorCode = kerr.NotController.Code
		rq.respond(resp)
		return
	}
	go func() { rq.respond(c.ListPartitionReassignments(ctx, req)) }()
}
