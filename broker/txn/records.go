package txn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record versions written to __transaction_state, as Kafka's
// TransactionLog writes them: key v0 (the transactional id); value v0,
// or v1 when transaction.version is 1 or 2 (Kafka 4.0, KIP-890): flexible,
// with the previous and next producer ids and the client's transaction
// version as tagged fields.
const (
	keyVersion = 0
)

func encodeKey(id string) []byte {
	k := kmsg.TxnMetadataKey{Version: keyVersion, TransactionalID: id}
	return k.AppendTo(nil)
}

// encodeValue is Kafka's TransactionLog.valueToBytes: an Empty
// transaction has no partition list (null), the others list theirs by
// topic.
func encodeValue(v record, version int16) []byte {
	out := kmsg.NewTxnMetadataValue()
	out.Version = version
	out.ProducerID, out.ProducerEpoch = v.producerID, v.epoch
	out.TimeoutMillis = v.timeoutMs
	out.State = kmsg.TransactionState(v.state)
	out.LastUpdateTimestamp, out.StartTimestamp = v.updateMs, v.startMs
	if version >= 1 {
		out.PreviousProducerID = v.lastProducerID
		out.NextProducerID = v.nextProducerID
		if v.tv2 {
			out.ClientTransactionVersion = 2
		}
	}
	if v.state != Empty {
		out.Topics = []kmsg.TxnMetadataValueTopic{}
		for _, tp := range sortedPartitions(v.partitions) {
			n := len(out.Topics)
			if n == 0 || out.Topics[n-1].Topic != tp.Topic {
				out.Topics = append(out.Topics, kmsg.TxnMetadataValueTopic{Topic: tp.Topic})
				n++
			}
			out.Topics[n-1].Partitions = append(out.Topics[n-1].Partitions, tp.Partition)
		}
	}
	return out.AppendTo(nil)
}

// record is the persisted part of a transaction's metadata. tv2 and
// nextProducerID are kept by value v1 only.
type record struct {
	producerID, lastProducerID int64
	nextProducerID             int64
	tv2                        bool
	epoch                      int16
	timeoutMs                  int32
	state                      State
	partitions                 map[TopicPartition]bool
	startMs, updateMs          int64
}

// parseKey decodes a __transaction_state key.
func parseKey(b []byte) (string, error) {
	if len(b) < 2 {
		return "", errors.New("short key")
	}
	if v := int16(binary.BigEndian.Uint16(b)); v != keyVersion {
		return "", fmt.Errorf("unknown transaction log key version %d", v)
	}
	var k kmsg.TxnMetadataKey
	if err := k.ReadFrom(b); err != nil {
		return "", fmt.Errorf("transaction log key: %w", err)
	}
	return k.TransactionalID, nil
}

// parseValue decodes a __transaction_state value (v0 or v1).
func parseValue(b []byte) (record, error) {
	if len(b) < 2 {
		return record{}, errors.New("short value")
	}
	if v := int16(binary.BigEndian.Uint16(b)); v < 0 || v > 1 {
		return record{}, fmt.Errorf("unknown transaction log value version %d", v)
	}
	var v kmsg.TxnMetadataValue
	v.Default()
	if err := v.ReadFrom(b); err != nil {
		return record{}, fmt.Errorf("transaction log value: %w", err)
	}
	st := State(v.State)
	if st < Empty || st > PrepareEpochFence {
		return record{}, fmt.Errorf("unknown transaction state %d", v.State)
	}
	if v.ProducerEpoch < -1 {
		return record{}, fmt.Errorf("producer epoch %d", v.ProducerEpoch)
	}
	r := record{
		producerID: v.ProducerID, lastProducerID: -1, nextProducerID: -1, epoch: v.ProducerEpoch, timeoutMs: v.TimeoutMillis,
		state: st, partitions: map[TopicPartition]bool{}, startMs: v.StartTimestamp, updateMs: v.LastUpdateTimestamp,
	}
	if v.Version >= 1 {
		r.lastProducerID, r.nextProducerID = v.PreviousProducerID, v.NextProducerID
		r.tv2 = v.ClientTransactionVersion >= 2
	}
	for _, t := range v.Topics {
		for _, p := range t.Partitions {
			r.partitions[TopicPartition{t.Topic, p}] = true
		}
	}
	if st == Empty && len(r.partitions) > 0 {
		return record{}, errors.New("an Empty transaction lists partitions")
	}
	return r, nil
}

func sortedPartitions(m map[TopicPartition]bool) []TopicPartition {
	out := make([]TopicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}
