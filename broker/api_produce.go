package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var _ = serve(0, "Produce", 3, 9, (*Broker).handleProduce)

// handleProduce appends to each partition as leader. acks=0 gets no
// response (any error closes the connection); acks=1 is answered after the
// local append; acks=-1 waits, off the handler thread, until the HW covers
// the append (the delayed-produce purgatory, KAFKA-SPEC §3).
func (b *Broker) handleProduce(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	acks := req.Acks

	type pending struct {
		ti, pi     int
		rp         *kmsg.ProduceResponseTopicPartition
		part       waitable
		nextOffset int64
	}
	var waits []pending
	anyErr := false
	for ti, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		for pi, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset = -1
			sp.LogAppendTime = -1
			sp.LogStartOffset = -1
			if acks != 0 && acks != 1 && acks != -1 {
				sp.ErrorCode = kerr.InvalidRequiredAcks.Code
			} else if p := b.partition(rt.Topic, rp.Partition); p == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else if res, err := p.AppendAsLeader(rp.Records, acks); err != nil {
				sp.ErrorCode = errCode(err)
			} else {
				sp.BaseOffset = res.FirstOffset
				sp.LogStartOffset = res.LogStartOffset
				b.metrics.messagesIn.Add(float64(res.Records))
				if acks == -1 {
					waits = append(waits, pending{ti: ti, pi: pi, part: p, nextOffset: res.LastOffset + 1})
				}
			}
			anyErr = anyErr || sp.ErrorCode != 0
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	for i := range waits {
		waits[i].rp = &resp.Topics[waits[i].ti].Partitions[waits[i].pi]
	}
	switch {
	case acks == 0:
		if anyErr {
			rq.closeConn()
		} else {
			rq.noResponse()
		}
		return
	case acks != -1 || len(waits) == 0:
		rq.respond(resp)
		return
	}
	// The delayed produce: complete when every partition's HW covers the
	// append, the leadership changes, or the request times out.
	deadline := time.Now().Add(time.Duration(req.TimeoutMillis) * time.Millisecond)
	// check records every partition that completed and returns the first
	// one still pending (nil when all are done).
	check := func() waitable {
		var first waitable
		for i := range waits {
			w := &waits[i]
			if w.part == nil {
				continue
			}
			complete, err := w.part.AcksAllStatus(w.nextOffset)
			switch {
			case err != nil:
				w.rp.ErrorCode = errCode(err)
				w.part = nil
			case complete:
				w.part = nil
			case first == nil:
				first = w.part
			}
		}
		return first
	}
	if check() == nil {
		rq.respond(resp)
		return
	}
	go func() {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		for {
			// Take the change channel of a pending partition, then re-check:
			// a change between the two is not missed, and if that partition
			// completed meanwhile, the loop picks the next one.
			watched := check()
			if watched == nil {
				rq.respond(resp)
				return
			}
			ch := watched.Changed()
			if check() != watched {
				continue
			}
			select {
			case <-ch:
			case <-timer.C:
				check()
				for _, w := range waits {
					if w.part != nil {
						w.rp.ErrorCode = kerr.RequestTimedOut.Code
					}
				}
				rq.respond(resp)
				return
			case <-ctx.Done():
				return
			}
		}
	}()
}

// waitable is a partition's side of the delayed-produce purgatory.
type waitable interface {
	AcksAllStatus(requiredOffset int64) (bool, error)
	Changed() <-chan struct{}
}

// errCode maps an error to a Kafka error code; anything that is not a Kafka
// error is a storage error.
func errCode(err error) int16 {
	if ke, ok := err.(*kerr.Error); ok {
		return ke.Code
	}
	return kerr.KafkaStorageError.Code
}
