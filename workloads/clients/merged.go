package clients

import (
	"context"
	"time"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// fetched is a record a partition's reader delivered. accept, when set,
// is called as a poll takes the record and says whether it does (false:
// the record is dropped, never handed to the application).
type fetched struct {
	partition int32
	offset    int64
	value     []byte
	accept    func() bool
}

func (f fetched) addTo(r *workloads.Reads) {
	if f.accept == nil || f.accept() {
		r.Add(f.partition, f.offset, f.value)
	}
}

// merged is the poll side of a consumer whose partitions are read by
// readers of their own (sarama's partition consumers, kafka-go's Readers),
// each forwarding what it delivers to msgs and its errors to fail.
type merged struct {
	msgs chan fetched
	errs chan error
	name func(error) string // an error as the history names it
}

func newMerged(name func(error) string) *merged { return newMergedBuffer(name, 0) }

// newMergedBuffer is newMerged whose readers can deliver up to size
// records ahead of the polls.
func newMergedBuffer(name func(error) string, size int) *merged {
	return &merged{msgs: make(chan fetched, size), errs: make(chan error, 16), name: name}
}

// fail passes a reader's error to the next poll; a poll keeps the first.
func (m *merged) fail(err error) {
	select {
	case m.errs <- err:
	default:
	}
}

// maxPoll bounds the records one poll returns.
const maxPoll = 10000

// Poll waits up to timeout for the first record, then takes every record
// already delivered without waiting more. It is ok with the records, or
// info when a reader reported an error and none came.
func (m *merged) Poll(ctx context.Context, timeout time.Duration) (workloads.Polled, error) {
	var reads workloads.Reads
	var firstErr error
	note := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case f := <-m.msgs:
		f.addTo(&reads)
	case err := <-m.errs:
		note(err)
	case <-t.C:
	case <-ctx.Done():
	}
more:
	for reads.N < maxPoll {
		select {
		case f := <-m.msgs:
			f.addTo(&reads)
		case err := <-m.errs:
			note(err)
		default:
			break more
		}
	}
	p := workloads.Polled{Type: history.OK, Reads: reads.Records()}
	if firstErr != nil {
		p.Error = m.name(firstErr)
		if reads.N == 0 {
			p.Type = history.Info
		}
	}
	return p, nil
}
