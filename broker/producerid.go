package broker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// producerIDBlock is how many ids are reserved per write, like Kafka's
// ProducerIdManager blocks.
const producerIDBlock = 1000

// producerIDs hands out producer ids; standalone, blocks are reserved in
// log.dirs[0]/isrlab-producer-id so ids never repeat across restarts.
type producerIDs struct {
	path      string
	mu        sync.Mutex
	next, end int64
}

func openProducerIDs(dir string) (*producerIDs, error) {
	p := &producerIDs{path: filepath.Join(dir, "isrlab-producer-id")}
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

func (p *producerIDs) allocate() (int64, error) {
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

// handleInitProducerID gives an idempotent producer a fresh id at epoch 0.
// Transactions are not supported.
func (b *Broker) handleInitProducerID(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		resp.ErrorCode = kerr.InvalidRequest.Code
		rq.respond(resp)
		return
	}
	id, err := b.producerIDs.allocate()
	if err != nil {
		b.log.Error("allocate producer id", "err", err)
		resp.ErrorCode = kerr.UnknownServerError.Code
	} else {
		resp.ProducerID, resp.ProducerEpoch = id, 0
	}
	rq.respond(resp)
}
