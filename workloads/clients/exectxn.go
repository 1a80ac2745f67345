package clients

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// The exec client is a workloads.TxnClient when its driver names
// FeatureTxn in its hello (docs/client-protocol.md, "Transactions").

// openTxn starts the driver asking for FeatureTxn and opens op's process;
// a driver that does not name the feature is a CapabilityError.
func (e *execClient) openTxn(ctx context.Context, op execOp) error {
	if err := e.start(ctx, FeatureTxn); err != nil {
		return err
	}
	if err := e.need(FeatureTxn); err != nil {
		return err
	}
	return e.open(ctx, op)
}

// ReadCommitted opens consumer process proc reading each of parts
// read_committed from its start.
func (e *execClient) ReadCommitted(ctx context.Context, proc int, parts []int32) (workloads.Consumer, error) {
	if err := e.openTxn(ctx, execOp{Process: proc, F: "open-consumer", Partitions: parts, Isolation: "read_committed"}); err != nil {
		return nil, err
	}
	return &execProcess{e: e, proc: proc}, nil
}

// Transactor opens transactional producer process proc; with t.Polls
// the driver also opens a read_committed consumer of every partition for
// it. The driver initializes the producer's transactions within the
// open's timeout; an open that fails is retried until ctx ends (the
// transaction coordinator may be down), unless the driver is gone or
// cannot run transactions.
func (e *execClient) Transactor(ctx context.Context, proc int, t workloads.TxnProducer) (workloads.Transactor, error) {
	op := execOp{Process: proc, F: "open-transactional-producer", TransactionalID: t.ID, TransactionTimeoutMs: t.Timeout.Milliseconds()}
	if t.Polls {
		op.Partitions = make([]int32, e.cfg.Partitions)
		for p := range op.Partitions {
			op.Partitions[p] = int32(p)
		}
	}
	for {
		err := e.openTxn(ctx, op)
		var ce *workloads.CapabilityError
		switch {
		case err == nil:
			return &execTransactor{execProcess{e: e, proc: proc}}, nil
		case errors.As(err, &ce), errors.Is(err, ErrDriver), ctx.Err() != nil:
			return nil, fmt.Errorf("open transactional producer %s: %w", t.ID, err)
		}
		pause := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
		pause.Stop()
	}
}

// execTransactor is a transactional producer process of the driver; its
// Poll polls the producer's own read_committed consumer.
type execTransactor struct{ execProcess }

// untilDeadline is how long an operation bounded by ctx may take: until
// its deadline, else def.
func untilDeadline(ctx context.Context, def time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return def
}

func (t *execTransactor) Begin() error {
	d, err := t.e.call(execOp{Process: t.proc, F: "begin"}, t.e.cfg.RequestTimeout)
	switch {
	case err != nil:
		return err
	case d.Type != "ok":
		return fmt.Errorf("%s: %s", d.Type, d.Error)
	}
	return nil
}

// Produce sends recs in the transaction as one produce operation; the
// driver reports each record's offset (-1: not acknowledged) and the
// first error.
func (t *execTransactor) Produce(ctx context.Context, recs []workloads.Record) ([]int64, error) {
	op := execOp{Process: t.proc, F: "produce", Records: make([]execRecord, len(recs))}
	for i, r := range recs {
		op.Records[i] = execRecord{Partition: r.Partition, Key: r.Key, Value: strconv.FormatInt(r.Value, 10)}
	}
	offs := make([]int64, len(recs))
	for i := range offs {
		offs[i] = -1
	}
	d, err := t.e.call(op, untilDeadline(ctx, t.e.cfg.DeliveryTimeout))
	if err != nil {
		return offs, err
	}
	if d.Type == "ok" && len(d.Offsets) != len(recs) {
		return offs, fmt.Errorf("%w: %s: produce of %d records completed with %d offsets", ErrDriver, t.e.who(), len(recs), len(d.Offsets))
	}
	for i := range min(len(d.Offsets), len(offs)) {
		offs[i] = d.Offsets[i]
	}
	if d.Type != "ok" {
		if d.Error == "" {
			d.Error = d.Type
		}
		return offs, errors.New(d.Error)
	}
	return offs, nil
}

// End commits or aborts; the driver maps its client's answer to ok, fail
// or info. A driver that is gone leaves the outcome unknown.
func (t *execTransactor) End(ctx context.Context, commit bool) workloads.TxnEnd {
	d, err := t.e.call(execOp{Process: t.proc, F: "end", Commit: &commit}, untilDeadline(ctx, t.e.cfg.DeliveryTimeout))
	if err != nil {
		return workloads.TxnEnd{Type: history.Info, Error: err.Error(), Done: true}
	}
	typ, _ := history.ParseType(d.Type)
	return workloads.TxnEnd{Type: typ, Error: d.Error, Done: d.Done}
}
