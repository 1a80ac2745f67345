package txn

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeTransactions handles DescribeTransactions (KIP-664).
func (m *Manager) DescribeTransactions(req *kmsg.DescribeTransactionsRequest) *kmsg.DescribeTransactionsResponse {
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	m.mu.Lock()
	defer m.unlock()
	for _, id := range req.TransactionalIDs {
		s := kmsg.NewDescribeTransactionsResponseTransactionState()
		s.TransactionalID = id
		s.ProducerID, s.ProducerEpoch, s.StartTimestamp = -1, -1, -1
		if id == "" {
			s.ErrorCode = kerr.InvalidRequest.Code
			resp.TransactionStates = append(resp.TransactionStates, s)
			continue
		}
		if _, e := m.ownerLocked(id); e != nil {
			s.ErrorCode = e.Code
			resp.TransactionStates = append(resp.TransactionStates, s)
			continue
		}
		t := m.txns[id]
		if t == nil || t.state == Dead {
			s.ErrorCode = kerr.TransactionalIDNotFound.Code
			resp.TransactionStates = append(resp.TransactionStates, s)
			continue
		}
		s.State = t.state.String()
		s.TimeoutMillis, s.StartTimestamp = t.timeoutMs, t.startMs
		s.ProducerID, s.ProducerEpoch = t.producerID, t.epoch
		for _, tp := range sortedPartitions(t.partitions) {
			n := len(s.Topics)
			if n == 0 || s.Topics[n-1].Topic != tp.Topic {
				s.Topics = append(s.Topics, kmsg.DescribeTransactionsResponseTransactionStateTopic{Topic: tp.Topic})
				n++
			}
			s.Topics[n-1].Partitions = append(s.Topics[n-1].Partitions, tp.Partition)
		}
		resp.TransactionStates = append(resp.TransactionStates, s)
	}
	return resp
}

// ListTransactions handles ListTransactions (KIP-664): the transactional
// ids this broker coordinates, filtered by state names and producer ids;
// unknown state names are listed back.
func (m *Manager) ListTransactions(req *kmsg.ListTransactionsRequest) *kmsg.ListTransactionsResponse {
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	m.mu.Lock()
	defer m.unlock()
	if m.owned.AnyLoading() {
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp
	}
	states := map[State]bool{}
	for _, name := range req.StateFilters {
		if s, ok := stateNamed(name); ok {
			states[s] = true
		} else {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, name)
		}
	}
	pids := map[int64]bool{}
	for _, p := range req.ProducerIDFilters {
		pids[p] = true
	}
	ids := make([]string, 0, len(m.txns))
	for id := range m.txns {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	now := m.nowMs()
	for _, id := range ids {
		t := m.txns[id]
		switch {
		case t.state == Dead:
		case len(pids) > 0 && !pids[t.producerID]:
		case len(req.StateFilters) > 0 && !states[t.state]:
		case req.DurationFilterMillis >= 0 && now-t.startMs < req.DurationFilterMillis:
			// v1 (KIP-994): only transactions running at least that long.
		default:
			s := kmsg.NewListTransactionsResponseTransactionState()
			s.TransactionalID, s.ProducerID, s.TransactionState = id, t.producerID, t.state.String()
			resp.TransactionStates = append(resp.TransactionStates, s)
		}
	}
	return resp
}
