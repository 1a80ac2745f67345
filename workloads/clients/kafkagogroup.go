package clients

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// GroupConsumer opens a member of m.Group on kafka-go: a Reader with
// GroupID (kafka-go's own consumer group: eager rebalancing, the range
// balancer) reading the topic, FetchMessage for the polls. With
// m.AutoCommit the Reader commits asynchronously every
// m.AutoCommitInterval (ReaderConfig.CommitInterval), when its
// generation ends and when it is closed, what was handed to
// CommitMessages: the driver hands each record as a poll takes it, so
// what was delivered is committed, processed or not (ReadMessage's
// behaviour, batched). Without it CommitInterval is 0 and Commit calls
// CommitMessages, which waits for the commit.
//
// kafka-go tells the application neither its assignments nor an
// asynchronous commit's outcome (its errors go to ErrorLogger as text),
// and a synchronous commit returns only the last of up to three
// attempts' errors: both are read on the wire, as for sarama
// (commitWatch): each OffsetCommit request and its answer, and the
// member's assignment in each SyncGroup answer.
func (k *kafkagoClient) GroupConsumer(_ context.Context, _ int, m workloads.GroupMember) (workloads.GroupConsumer, error) {
	g := &kafkagoGroup{topic: k.cfg.Topic, member: m, timeout: k.cfg.RequestTimeout, pollTimeout: k.cfg.PollTimeout,
		merged: newMerged(func(err error) string { _, name := kafkagoOutcome(err, false); return name })}
	g.watch = &commitWatch{dial: k.dial, report: g.report, topic: k.cfg.Topic, assigned: g.assigned}
	_, rc, err := kafkagoConfig(k.cfg, k.own)
	if err != nil {
		return nil, err
	}
	rc.Brokers, rc.Topic, rc.GroupID = k.seeds, k.cfg.Topic, m.Group
	rc.Dialer = &kafka.Dialer{DialFunc: g.watch.Dial, Timeout: k.cfg.RequestTimeout, SASLMechanism: k.mech}
	rc.StartOffset = kafka.FirstOffset // without a committed offset
	if m.AutoCommit {
		rc.CommitInterval = m.AutoCommitInterval
		if rc.CommitInterval <= 0 {
			rc.CommitInterval = 5 * time.Second
		}
	}
	g.r = kafka.NewReader(*rc)
	g.ctx, g.stop = context.WithCancel(context.Background())
	g.wg.Add(1)
	go g.forward()
	return g, nil
}

// kafkagoGroup is a kafka-go consumer group member.
type kafkagoGroup struct {
	*merged
	topic       string
	member      workloads.GroupMember
	timeout     time.Duration // a Commit's wait: request.timeout
	pollTimeout time.Duration
	watch       *commitWatch
	r           *kafka.Reader
	ctx         context.Context // ends at Close
	stop        context.CancelFunc
	wg          sync.WaitGroup // forward
	once        sync.Once

	// cbMu makes Assigned and Committed one at a time.
	cbMu sync.Mutex
	mu   sync.Mutex
	// collect, during Commit, gathers the commits written; otherwise
	// they are the client's own (member.Committed).
	collect  *[]workloads.Committed
	commitMu sync.Mutex // Commit one at a time
}

// forward hands the Reader's messages to the polls. With auto-commit a
// poll that takes a record hands it to CommitMessages (asynchronous: it
// queues the offset for the next commit), as ReadMessage does.
func (g *kafkagoGroup) forward() {
	defer g.wg.Done()
	for {
		m, err := g.r.FetchMessage(g.ctx)
		if g.ctx.Err() != nil {
			return
		}
		if err != nil {
			g.fail(err)
			if errors.Is(err, io.EOF) {
				return
			}
			continue
		}
		f := fetched{partition: int32(m.Partition), offset: m.Offset, value: m.Value}
		if g.member.AutoCommit {
			f.accept = func() bool {
				// Queued unless the Reader is between generations with
				// its queue full: then the record is delivered unmarked.
				ctx, cancel := context.WithTimeout(g.ctx, g.pollTimeout)
				defer cancel()
				g.r.CommitMessages(ctx, m)
				return true
			}
		}
		select {
		case g.msgs <- f:
		case <-g.ctx.Done():
			return
		}
	}
}

func (g *kafkagoGroup) assigned(parts []int32) {
	if g.member.Assigned == nil {
		return
	}
	g.cbMu.Lock()
	defer g.cbMu.Unlock()
	g.member.Assigned(parts)
}

// report takes a commit read on the wire: Commit's while it waits, the
// client's own otherwise.
func (g *kafkagoGroup) report(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	c := workloads.CommitOutcome(g.topic, req, resp, err)
	g.mu.Lock()
	if g.collect != nil {
		*g.collect = append(*g.collect, c)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	if g.member.Committed == nil {
		return
	}
	g.cbMu.Lock()
	defer g.cbMu.Unlock()
	g.member.Committed(c)
}

// Commit commits offs through CommitMessages (the message before each
// offset: kafka-go commits a message's offset + 1) and waits at most
// request.timeout. The outcome, from kafka-go v0.4.51's reader.go
// (commitLoopImmediate, commitOffsetsWithRetry) and the requests read
// on the wire while it waited (kafkagoCommitOutcome).
func (g *kafkagoGroup) Commit(ctx context.Context, offs map[int32]int64) workloads.Committed {
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	var msgs []kafka.Message
	asked := []history.PartitionOffset{}
	for _, p := range slices.Sorted(maps.Keys(offs)) {
		msgs = append(msgs, kafka.Message{Topic: g.topic, Partition: int(p), Offset: offs[p] - 1})
		asked = append(asked, history.PartitionOffset{Partition: p, Offset: offs[p]})
	}
	var got []workloads.Committed
	g.mu.Lock()
	g.collect = &got
	g.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, g.timeout)
	err := g.r.CommitMessages(cctx, msgs...)
	cancel()
	g.mu.Lock()
	g.collect = nil
	g.mu.Unlock()
	return kafkagoCommitOutcome(err, asked, got)
}

// kafkagoCommitOutcome is a synchronous CommitMessages' outcome from its
// error and the OffsetCommit requests written while it ran (got, each
// judged as workloads.CommitOutcome judges it):
//
//   - nil: the last attempt was accepted for every partition
//     (Conn.offsetCommit returns the first partition's error): ok;
//   - a context's error: CommitMessages stopped waiting, the commit may
//     be queued for the Reader's commit loop or in flight: info;
//   - io.ErrClosedPipe: the Reader was closed before it took the
//     commit: fail;
//   - any other error is the last of commitOffsetsWithRetry's attempts
//     (three), all of them over: the requests read on the wire decide
//     (the least certain of them; fail when none was written, as when
//     the generation has no coordinator connection).
func kafkagoCommitOutcome(err error, asked []history.PartitionOffset, got []workloads.Committed) workloads.Committed {
	switch {
	case err == nil:
		return workloads.Committed{Type: history.OK, Offsets: asked}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return workloads.Committed{Type: history.Info, Offsets: asked, Error: err.Error()}
	case errors.Is(err, io.ErrClosedPipe):
		return workloads.Committed{Type: history.Fail, Offsets: []history.PartitionOffset{}, Error: "not committed: the reader is closed"}
	case len(got) == 0:
		return workloads.Committed{Type: history.Fail, Offsets: []history.PartitionOffset{}, Error: fmt.Sprintf("not committed: kafka-go wrote no OffsetCommit request (%v)", err)}
	}
	c := mergeCommits(got)
	if c.Error == "" {
		c.Error = err.Error()
	}
	return c
}

// Close closes the Reader as kafka-go's users do: its generation ends
// (with auto-commit, after a last commit of what was queued), it leaves
// the group.
func (g *kafkagoGroup) Close() error {
	g.once.Do(func() {
		g.stop()
		g.r.Close()
		g.wg.Wait()
	})
	return nil
}

// Crash ends the member without a commit: the driver refuses every
// OffsetCommit request from here on (commitWatch.crash), so the final
// commit of the Reader's closing generation writes nothing; the member
// still leaves the group.
func (g *kafkagoGroup) Crash() error {
	g.watch.crash()
	return g.Close()
}
