package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
)

// producerIDBlock is how many ids are reserved per write, like Kafka's
// ProducerIdManager blocks.
const producerIDBlock = coord.ProducerIDBlockSize

// producerIDTimeout bounds an InitProducerId that must reserve a block in
// the coordinator: well inside a client's request timeout (kgo allows 10 s
// for requests without a timeout field), so a coordinator without quorum
// gets a retriable answer instead of a hung request.
const producerIDTimeout = 5 * time.Second

// producerIDAllocator hands out producer ids that no other broker of the
// cluster hands out, across restarts.
type producerIDAllocator interface {
	allocate(ctx context.Context) (int64, error)
}

// fileProducerIDs is the standalone allocator: blocks are reserved in
// log.dirs[0]/isrlab-producer-id so ids never repeat across restarts.
type fileProducerIDs struct {
	path      string
	mu        sync.Mutex
	next, end int64
}

func openProducerIDs(dir string) (*fileProducerIDs, error) {
	p := &fileProducerIDs{path: filepath.Join(dir, "isrlab-producer-id")}
	data, err := os.ReadFile(p.path)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		return nil, fmt.Errorf("read producer id block: %w", err)
	default:
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("producer id block file %s is corrupt: %q", p.path, data)
		}
		p.next, p.end = n, n
	}
	return p, nil
}

func (p *fileProducerIDs) allocate(context.Context) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next == p.end {
		end := p.end + producerIDBlock
		tmp := p.path + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.FormatInt(end, 10)+"\n"), 0o644); err != nil {
			return 0, err
		}
		if err := os.Rename(tmp, p.path); err != nil {
			return 0, err
		}
		p.end = end
	}
	id := p.next
	p.next++
	return id, nil
}

// coordProducerIDs is the clustered allocator: blocks are reserved in the
// coordinator at /latest_producer_id_block, as ZooKeeper-era Kafka's
// ProducerIdManager does, so the brokers of a cluster hand out disjoint ids
// and a restarted broker starts a fresh block. The first block is reserved
// on the first InitProducerId, so a broker starts without a coordinator.
type coordProducerIDs struct {
	coord  *coord.Client
	broker int32
	// sem is a mutex whose waiters give up when their ctx ends: one
	// request reserves a block while the others wait for it.
	sem       chan struct{}
	next, end int64 // end is exclusive; next == end: no block left
}

func newCoordProducerIDs(c *coord.Client, broker int32) *coordProducerIDs {
	return &coordProducerIDs{coord: c, broker: broker, sem: make(chan struct{}, 1)}
}

func (p *coordProducerIDs) allocate(ctx context.Context) (int64, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-p.sem }()
	if p.next == p.end {
		blk, err := p.coord.ReserveProducerIDs(ctx, p.broker)
		if err != nil {
			return 0, err
		}
		p.next, p.end = blk.Start, blk.End+1
	}
	id := p.next
	p.next++
	return id, nil
}

var _ = serve(22, "InitProducerId", 0, 4, (*Broker).handleInitProducerID, notIn("0.10"), in("2.4", 0, 2), in("2.6", 0, 3), withTV(5), k40(0, 5))

// handleInitProducerID gives an idempotent producer a fresh id at epoch 0;
// with a transactional id the transaction coordinator answers (api_txn.go).
// When no block can be reserved in time the answer is
// COORDINATOR_LOAD_IN_PROGRESS, retriable for every client, as Kafka 3.x
// answers while it waits for a block.
func (b *Broker) handleInitProducerID(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		b.api.txn.initTransactional(ctx, rq, req)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, producerIDTimeout)
	defer cancel()
	id, err := b.producerIDs.allocate(ctx)
	switch {
	case err == nil:
		resp.ProducerID, resp.ProducerEpoch = id, 0
	case errors.Is(err, coord.ErrNoQuorum), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		b.log.Warn("allocate producer id", "err", err)
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
	default:
		b.log.Error("allocate producer id", "err", err)
		resp.ErrorCode = kerr.UnknownServerError.Code
	}
	rq.respond(resp)
}
