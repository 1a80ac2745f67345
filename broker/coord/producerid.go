package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ProducerIDBlockSize is how many producer ids one block holds (Kafka's
// ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE).
const ProducerIDBlockSize = 1000

// ProducerIDBlock is the value of /latest_producer_id_block: the last block
// of producer ids a broker reserved, Start to End inclusive. As in Kafka's
// ProducerIdBlockZNode the ids are JSON strings.
type ProducerIDBlock struct {
	Broker int32 `json:"broker"`
	Start  int64 `json:"block_start,string"`
	End    int64 `json:"block_end,string"`
}

type producerIDBlockJSON struct {
	Format int `json:"version"`
	ProducerIDBlock
}

// ReserveProducerIDs reserves the next ProducerIDBlockSize producer ids for
// broker and returns them, as ZooKeeper-era Kafka's ProducerIdManager does:
// it writes the block after the one stored at /latest_producer_id_block
// with a compare-and-swap on the key's version and tries again when another
// broker wrote first, so concurrent callers get disjoint blocks. The ids
// live in the coordinator, so they never repeat across broker restarts or
// controller changes. The whole call, retries included, is bounded by the
// call timeout when ctx has no deadline; ErrNoQuorum when the coordinator
// does not answer. An ambiguous failure may have written the block: the
// next call then skips it, so ids are lost, never repeated.
func (c *Client) ReserveProducerIDs(ctx context.Context, broker int32) (ProducerIDBlock, error) {
	const op = "reserve producer id block"
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	// Assume no block yet; a failed compare reads the current one, so each
	// attempt is one round trip.
	var cur []byte
	var version int64
	for {
		next := int64(0)
		if cur != nil {
			last, err := decodeProducerIDBlock(cur)
			if err != nil {
				return ProducerIDBlock{}, fmt.Errorf("%s: %w", op, err)
			}
			if last.End > math.MaxInt64-ProducerIDBlockSize {
				return ProducerIDBlock{}, fmt.Errorf("%s: producer ids exhausted (last block ends at %d)", op, last.End)
			}
			next = last.End + 1
		}
		blk := ProducerIDBlock{Broker: broker, Start: next, End: next + ProducerIDBlockSize - 1}
		val, err := json.Marshal(producerIDBlockJSON{Format: 1, ProducerIDBlock: blk})
		if err != nil {
			return ProducerIDBlock{}, fmt.Errorf("%s: %w", op, err)
		}
		resp, err := c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.ModRevision(producerIDBlockKey), "=", version)).
			Then(clientv3.OpPut(producerIDBlockKey, string(val))).
			Else(clientv3.OpGet(producerIDBlockKey)).
			Commit()
		if err != nil {
			return ProducerIDBlock{}, wrapErr(op, err)
		}
		if resp.Succeeded {
			return blk, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			// Deleted meanwhile (by hand): like Kafka, start again at 0.
			cur, version = nil, 0
			continue
		}
		cur, version = kvs[0].Value, kvs[0].ModRevision
	}
}

func decodeProducerIDBlock(val []byte) (ProducerIDBlock, error) {
	var j producerIDBlockJSON
	if err := json.Unmarshal(val, &j); err != nil {
		return ProducerIDBlock{}, fmt.Errorf("decode producer id block %q: %w", val, err)
	}
	if j.Start < 0 || j.End < j.Start {
		return ProducerIDBlock{}, fmt.Errorf("decode producer id block %q: bad range", val)
	}
	return j.ProducerIDBlock, nil
}
