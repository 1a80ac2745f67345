package clients

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// saramaTxnConfig is the sarama configuration of a transactional
// producer process of the txn workload: the workload's keys as for the
// log workload, then an idempotent producer (Producer.Idempotent,
// Net.MaxOpenRequests 1, as sarama requires of Producer.Transaction.ID)
// with the process's transactional.id and transaction.timeout, and
// consumers reading read_committed. sarama's Config.Validate is the
// check: a client.config that contradicts it is a CapabilityError.
func saramaTxnConfig(cfg workloads.Config, own map[string]string, t workloads.TxnProducer) (*sarama.Config, error) {
	cfg.Idempotent = true
	c, err := saramaConfig(cfg, own)
	if err != nil {
		return nil, err
	}
	c.Producer.Transaction.ID = t.ID
	if t.Timeout > 0 {
		c.Producer.Transaction.Timeout = t.Timeout
	}
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	if err := c.Validate(); err != nil {
		return nil, &workloads.CapabilityError{Client: Sarama, Reason: err.Error()}
	}
	return c, nil
}

// checkSaramaTxn checks the sarama configuration of the txn workload.
// Reading in a consumer group (txn.group.id) is refused: the workload's
// group mode is franz-go's GroupTransactSession (a rebalance aborts the
// transaction and rewinds to the committed offsets), which the sarama
// driver does not play.
func checkSaramaTxn(cfg workloads.Config, own map[string]string) error {
	if cfg.TxnGroup != "" {
		return &workloads.CapabilityError{Client: Sarama, Reason: "txn.group.id (reading in a consumer group, its offsets committed in the transaction) runs on franz-go only; sarama runs the txn workload's producer-only and read-process-write transactions"}
	}
	_, err := saramaTxnConfig(cfg, own, workloads.TxnProducer{ID: "isrlab-check"})
	return err
}

// ReadCommitted opens a sarama Consumer reading each of parts
// read_committed (Consumer.IsolationLevel) from its start.
func (s *saramaClient) ReadCommitted(ctx context.Context, _ int, parts []int32) (workloads.Consumer, error) {
	conf := s.config(s.dial)
	conf.Consumer.IsolationLevel = sarama.ReadCommitted
	return s.consumer(ctx, conf, parts)
}

// Transactor opens a transactional AsyncProducer (sarama asks for its
// producer id when it opens: an open that fails is retried until ctx
// ends) whose connections count the EndTxn requests written
// (endTxnWatch), and with t.Polls a read_committed Consumer of every
// partition for read-process-write transactions.
func (s *saramaClient) Transactor(ctx context.Context, _ int, t workloads.TxnProducer) (workloads.Transactor, error) {
	conf, err := saramaTxnConfig(s.cfg, s.own, t)
	if err != nil {
		return nil, err
	}
	ends := &endTxnWatch{}
	withDialer(conf, ends.Dialer(s.dial))
	var ap sarama.AsyncProducer
	if err := retry(ctx, func() (err error) {
		ap, err = sarama.NewAsyncProducer(s.seeds, conf)
		return err
	}); err != nil {
		return nil, fmt.Errorf("new transactional producer %s: %w", t.ID, err)
	}
	tr := &saramaTransactor{prod: newSaramaProducer(ap, nil, &s.cfg, true), ends: ends}
	if t.Polls {
		parts := make([]int32, s.cfg.Partitions)
		for p := range parts {
			parts[p] = int32(p)
		}
		rc := s.config(s.dial)
		rc.Consumer.IsolationLevel = sarama.ReadCommitted
		if tr.cons, err = s.consumer(ctx, rc, parts); err != nil {
			tr.Close()
			return nil, err
		}
	}
	return tr, nil
}

// saramaTransactor is a transactional producer process on sarama.
type saramaTransactor struct {
	prod *saramaProducer
	ends *endTxnWatch
	cons *saramaConsumer // nil without read-process-write
	// ending waits for a CommitTxn or AbortTxn that outlived End's ctx.
	ending sync.WaitGroup
}

func (t *saramaTransactor) Begin() error { return t.prod.ap.BeginTxn() }

func (t *saramaTransactor) Poll(ctx context.Context, timeout time.Duration) (workloads.Polled, error) {
	if t.cons == nil {
		return workloads.Polled{Type: history.Info, Error: "the producer was opened without a consumer"}, nil
	}
	return t.cons.Poll(ctx, timeout)
}

// Produce hands every record to sarama, then waits for each outcome
// until ctx ends; the first error is named as saramaOutcome names it.
func (t *saramaTransactor) Produce(ctx context.Context, recs []workloads.Record) ([]int64, error) {
	offs := make([]int64, len(recs))
	// dones are the outcomes of the records sarama took: a prefix of
	// recs, since none is handed over after one was not.
	var dones []chan sentResult
	var first error
	for i, r := range recs {
		offs[i] = -1
		done := make(chan sentResult, 1)
		msg := &sarama.ProducerMessage{Topic: t.prod.cfg.Topic, Partition: r.Partition,
			Value: sarama.StringEncoder(strconv.FormatInt(r.Value, 10)), Metadata: done}
		if r.Key != "" {
			msg.Key = sarama.StringEncoder(r.Key)
		}
		if first == nil {
			select {
			case t.prod.ap.Input() <- msg:
				dones = append(dones, done)
				continue
			case <-ctx.Done():
				first = fmt.Errorf("sarama did not take the record before the transaction's deadline: %w", ctx.Err())
			}
		}
	}
	for i, done := range dones {
		select {
		case res := <-done:
			if res.err == nil {
				offs[i] = res.offset
			} else if first == nil {
				_, name := saramaOutcome(res.err, true)
				first = errors.New(name)
			}
		case <-ctx.Done():
			if first == nil {
				first = fmt.Errorf("no outcome from sarama before the transaction's deadline: %w", ctx.Err())
			}
		}
	}
	return offs, first
}

// End commits (CommitTxn) or aborts (AbortTxn) and maps sarama's answer
// with saramaTxnEnd. A commit refused before any EndTxn was written
// leaves the transaction open on the coordinator: it is aborted
// (AbortTxn), and when that fails too the process ends (the coordinator
// aborts the transaction at transaction.timeout; nobody commits it). An
// answer that does not come within ctx is info, and the process ends.
func (t *saramaTransactor) End(ctx context.Context, commit bool) workloads.TxnEnd {
	before := t.ends.Count()
	end := t.prod.ap.AbortTxn
	if commit {
		end = t.prod.ap.CommitTxn
	}
	err, ok := t.await(ctx, end)
	if !ok {
		return workloads.TxnEnd{Type: history.Info, Error: fmt.Sprintf("no outcome from sarama's %s before the transaction's deadline", map[bool]string{true: "CommitTxn", false: "AbortTxn"}[commit]), Done: true}
	}
	e := saramaTxnEnd(commit, err, t.ends.Count() != before, t.prod.ap.TxnStatus())
	if commit && e.Type == history.Fail {
		aerr, ok := t.await(ctx, t.prod.ap.AbortTxn)
		if !ok {
			e.Error, e.Done = e.Error+"; no outcome from AbortTxn before the transaction's deadline", true
			return e
		}
		a := saramaTxnEnd(false, aerr, true, t.prod.ap.TxnStatus())
		e.Done = e.Done || a.Done
		switch {
		case a.Type != history.Fail:
			e.Error += "; AbortTxn: " + a.Error
		case aerr != nil:
			_, name := saramaOutcome(aerr, true)
			e.Error += "; aborted (the epoch bump after it failed: " + name + ")"
		default:
			e.Error += "; aborted"
		}
	}
	return e
}

// await runs f (CommitTxn or AbortTxn, which take no context) and waits
// for it until ctx ends; ok is false when it did not return in time
// (Close waits for it).
func (t *saramaTransactor) await(ctx context.Context, f func() error) (err error, ok bool) {
	ch := make(chan error, 1)
	t.ending.Add(1)
	go func() {
		defer t.ending.Done()
		ch <- f()
	}()
	select {
	case err = <-ch:
		return err, true
	case <-ctx.Done():
		return nil, false
	}
}

// Close waits for a transaction end still in sarama, then closes the
// consumer and the producer. A transaction left open is aborted by the
// coordinator at transaction.timeout.
func (t *saramaTransactor) Close() error {
	t.ending.Wait()
	if t.cons != nil {
		t.cons.Close()
	}
	return t.prod.Close()
}

// saramaTxnEnd maps how sarama v1.61.1 ended a transaction (CommitTxn's
// or AbortTxn's error, whether an EndTxn request was written while it
// ran, and TxnStatus after it) to an outcome, from its
// transaction_manager.go (finishTransaction, endTxn,
// publishOffsetsToTxn) and async_producer.go (finishTransaction):
//
//   - nil from CommitTxn: EndTxn(commit) was answered without error
//     (endTxn returns only then, or after an error): ok.
//   - nil from AbortTxn: EndTxn(abort) was answered without error, or
//     nothing had been added to the transaction on the brokers, so there
//     was nothing to abort: fail, the abort confirmed.
//   - an error from CommitTxn with no EndTxn written: finishTransaction
//     returned before endTxn, with the error that put the producer in
//     error (a send's, ProducerTxnFlagInError: it refuses to commit),
//     or AddOffsetsToTxn's, or endTxn found no coordinator on any
//     attempt (TransactionCoordinator fails before a request is made).
//     No EndTxn(commit) was written, so the coordinator can only abort
//     the transaction: fail.
//   - an error from CommitTxn after an EndTxn was written: endTxn retries
//     a network error (Net.ReadTimeout, request.timeout, a broken
//     connection) and CONCURRENT_TRANSACTIONS up to
//     Producer.Transaction.Retry.Max times, and an attempt whose answer
//     was lost may have committed; a refusal after such an attempt
//     (INVALID_TXN_STATE, PRODUCER_FENCED) says nothing about it: info.
//   - an error from AbortTxn: the abort was not confirmed (no EndTxn
//     answer, or the producer in a fatal state that refuses to abort):
//     info, as franz-go's.
//   - an error with TxnStatus exactly ProducerTxnFlagInitializing: the
//     EndTxn was answered without error (only completeTransaction moves
//     an ending transaction there, when the producer's epoch must be
//     bumped) and the InitProducerId that bumps it failed after
//     (initializeTransactions; CONCURRENT_TRANSACTIONS while the
//     coordinator still writes the markers, a timeout): a commit whose
//     EndTxn was written committed, ok; an abort aborted, fail. The
//     producer has no epoch to go on with: Done.
//
// ProducerTxnFlagFatalError (fenced, INVALID_PRODUCER_ID_MAPPING, ...)
// means the producer can run no more transactions: Done. So does an
// unknown outcome: the workload goes on as a new process.
func saramaTxnEnd(commit bool, err error, endTxnWritten bool, status sarama.ProducerTxnStatusFlag) workloads.TxnEnd {
	e := workloads.TxnEnd{Done: status&sarama.ProducerTxnFlagFatalError != 0 || status == sarama.ProducerTxnFlagInitializing}
	name := ""
	if err != nil {
		_, name = saramaOutcome(err, true)
	}
	bumpFailed := err != nil && status == sarama.ProducerTxnFlagInitializing
	switch {
	case (err == nil || bumpFailed && endTxnWritten) && commit:
		e.Type = history.OK
	case err == nil || bumpFailed && !commit:
		e.Type = history.Fail
	case commit && !endTxnWritten:
		e.Type, e.Error = history.Fail, "commit refused before any EndTxn request was written: "+name
	default:
		e.Type, e.Error, e.Done = history.Info, name, true
	}
	return e
}

// endTxnKey is EndTxn's API key.
const endTxnKey = 26

// endTxnWatch counts the EndTxn requests a producer's connections began
// to write. sarama writes each request in one Write (Broker.write, from
// sendInternal), so a Write whose frame carries EndTxn's key is one; it
// is counted before its first byte goes out.
type endTxnWatch struct{ n atomic.Int64 }

// Dialer wraps dial so that its connections count.
func (w *endTxnWatch) Dialer(dial workloads.DialFunc) workloads.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &endTxnConn{Conn: c, n: &w.n}, nil
	}
}

// Count is how many EndTxn requests began to be written so far.
func (w *endTxnWatch) Count() int64 { return w.n.Load() }

type endTxnConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *endTxnConn) Write(b []byte) (int, error) {
	if len(b) >= 6 && int16(binary.BigEndian.Uint16(b[4:])) == endTxnKey {
		c.n.Add(1)
	}
	return c.Conn.Write(b)
}
