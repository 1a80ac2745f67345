package controller

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// quorumAPIs are the requests a KRaft controller node answers on its
// controller listener: the brokers' lifecycle (BrokerRegistration,
// BrokerHeartbeat), their ISR changes (AlterPartition) and the admin
// requests brokers forward to the controller (ElectLeaders, the partition
// reassignment APIs), with the versions Kafka 4.0 serves.
var quorumAPIs = wire.Table{
	18: {Min: 0, Max: 4}, // ApiVersions
	43: {Min: 0, Max: 2}, // ElectLeaders
	45: {Min: 0, Max: 0}, // AlterPartitionReassignments
	46: {Min: 0, Max: 0}, // ListPartitionReassignments
	56: {Min: 0, Max: 3}, // AlterPartition
	62: {Min: 0, Max: 4}, // BrokerRegistration
	63: {Min: 0, Max: 1}, // BrokerHeartbeat
}

// maxQuorumFrame bounds one request on the controller listener.
const maxQuorumFrame = 100 << 20

// Serve answers the controller listener's connections on ln until ctx
// ends: each request is handed to the running term (NOT_CONTROLLER when
// this node is not the active controller), one request at a time per
// connection, as brokers send them.
func (c *Controller) Serve(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.serveConn(ctx, conn)
		}()
	}
}

func (c *Controller) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	r := bufio.NewReader(conn)
	var buf, out []byte
	for {
		frame, err := wire.ReadFrame(r, maxQuorumFrame, buf)
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				c.log.Debug("controller listener: connection closed", "remote", conn.RemoteAddr(), "err", err)
			}
			return
		}
		buf = frame[:0]
		h, req, err := quorumAPIs.Decode(frame)
		var resp kmsg.Response
		switch {
		case err != nil && h.Key == wire.ApiVersionsKey && errors.Is(err, wire.ErrUnsupportedVersion):
			resp = quorumAPIs.ApiVersions(h.Version)
		case err != nil:
			c.log.Warn("controller listener: bad request; closing the connection", "remote", conn.RemoteAddr(), "err", err)
			return
		default:
			resp = c.handle(ctx, req)
		}
		out = wire.AppendResponse(out[:0], h, resp)
		if _, err := conn.Write(out); err != nil {
			return
		}
	}
}

// handle answers one decoded request.
func (c *Controller) handle(ctx context.Context, req kmsg.Request) kmsg.Response {
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		return quorumAPIs.ApiVersions(r.Version)
	case *kmsg.BrokerRegistrationRequest:
		return c.BrokerRegistration(ctx, r)
	case *kmsg.BrokerHeartbeatRequest:
		return c.BrokerHeartbeat(ctx, r)
	case *kmsg.AlterPartitionRequest:
		return c.AlterPartition(ctx, r)
	case *kmsg.ElectLeadersRequest:
		return c.ElectLeaders(ctx, r)
	case *kmsg.AlterPartitionAssignmentsRequest:
		return c.AlterPartitionReassignments(ctx, r)
	case *kmsg.ListPartitionReassignmentsRequest:
		return c.ListPartitionReassignments(ctx, r)
	}
	// The table admits nothing else.
	panic("controller listener: no handler for " + kmsg.NameForKey(req.Key()))
}
