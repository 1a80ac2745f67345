package txn

import (
	"sort"

	"github.com/isrlab/isrlab/broker/coordlog"
)

// abortTimedOut aborts, every transaction.abort.timed.out.transaction.
// cleanup.interval.ms, the ongoing transactions older than their
// transaction.timeout.ms, bumping the epoch so that the producer, a
// zombie now, is fenced (Kafka's abortTimedOutTransactions).
func (m *Manager) abortTimedOut() {
	m.mu.Lock()
	if m.closed {
		m.unlock()
		return
	}
	m.abort = m.clock.AfterFunc(m.cfg.AbortInterval, m.abortTimedOut)
	now := m.nowMs()
	var due []*txnMeta
	for _, t := range m.txns {
		if o := m.owned.Get(t.partition); o == nil || o.Loading || t.pending != nil || t.state != Ongoing {
			continue
		}
		if t.startMs+int64(t.timeoutMs) < now {
			due = append(due, t)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].id < due[j].id })
	for _, t := range due {
		x, err := t.prepareFence(now)
		if err != nil {
			m.logger.Error("fence timed-out transaction", "err", err)
			continue
		}
		o := m.owned.Get(t.partition)
		m.logger.Info("aborting timed-out transaction", "transactional_id", t.id, "producer_id", t.producerID, "producer_epoch", t.epoch, "timeout_ms", t.timeoutMs)
		m.later(func() {
			if _, e := m.endTxn(t, o, x.producerID, x.epoch, false, false, false); e != nil {
				m.logger.Info("abort timed-out transaction", "transactional_id", t.id, "err", e.Error())
			}
		})
	}
	m.unlock()
}

// expireIDs removes, every transaction.remove.expired.transaction.
// cleanup.interval.ms, the transactional ids without a transaction whose
// last update is transactional.id.expiration.ms old: a tombstone is
// written and the id is forgotten (Kafka's removeExpiredTransactionalIds).
func (m *Manager) expireIDs() {
	m.mu.Lock()
	if m.closed {
		m.unlock()
		return
	}
	m.expire = m.clock.AfterFunc(m.cfg.RemoveInterval, m.expireIDs)
	now := m.nowMs()
	var due []*txnMeta
	for _, t := range m.txns {
		if o := m.owned.Get(t.partition); o == nil || o.Loading || t.pending != nil {
			continue
		}
		switch t.state {
		case Empty, CompleteCommit, CompleteAbort:
			if t.updateMs+m.cfg.IDExpiration.Milliseconds() <= now {
				due = append(due, t)
			}
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].id < due[j].id })
	for _, t := range due {
		x, err := t.prepare(Dead, t.producerID, t.epoch, t.lastEpoch, t.timeoutMs, map[TopicPartition]bool{}, t.startMs, now)
		if err != nil {
			m.logger.Error("expire transactional id", "err", err)
			continue
		}
		o := m.owned.Get(t.partition)
		m.later(func() { m.removeID(t, o, x) })
	}
	m.unlock()
}

func (m *Manager) removeID(t *txnMeta, o *coordlog.Ownership, x *transit) {
	err := m.write(t.partition, t.id, nil)
	m.mu.Lock()
	defer m.unlock()
	current := m.owned.Get(t.partition) == o && m.txns[t.id] == t && t.pending == x
	if !current {
		return
	}
	if err != nil {
		m.logger.Info("write transactional id tombstone", "transactional_id", t.id, "err", err)
		t.pending = nil
		return
	}
	t.complete(x)
	delete(m.txns, t.id)
	m.logger.Info("expired transactional id", "transactional_id", t.id, "producer_id", t.producerID)
}
