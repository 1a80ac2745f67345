package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrStaleBrokerEpoch: a KRaft registration change named an epoch that is
// not the broker's current registration (Kafka's STALE_BROKER_EPOCH), or
// the broker is not registered.
var ErrStaleBrokerEpoch = errors.New("stale broker epoch")

// KRaft registrations. In KRaft mode (kafka.profile 4.0) the active
// controller, not the broker, writes /brokers/ids/<id>: persistently,
// without a lease, because a KRaft broker's liveness is its heartbeats to
// the controller (BrokerHeartbeatManager), which fences and unfences the
// registration (Kafka's RegisterBrokerRecord, FenceBrokerRecord and
// UnfenceBrokerRecord in the metadata log). Every write is fenced on the
// controller's Leadership.

// RegisterBrokerKRaft writes info's registration, fenced, and returns its
// epoch. A registration of the same IncarnationID keeps its epoch and its
// fenced state; another incarnation's is replaced and gets a new epoch
// (the new key's CreateRevision), as Kafka's ClusterControlManager gives a
// new incarnation a new broker epoch.
//
// rev is the coordinator revision of the write: a broker snapshot
// (WatchBrokers) older than it does not show it yet.
func (c *Client) RegisterBrokerKRaft(ctx context.Context, l *Leadership, info BrokerInfo) (epoch, rev int64, err error) {
	op := fmt.Sprintf("register KRaft broker %d", info.ID)
	key := brokerKey(info.ID)
	for {
		cctx, cancel := c.callCtx(ctx)
		cur, err := c.cli.Get(cctx, key)
		cancel()
		if err != nil {
			return 0, 0, wrapErr(op, err)
		}
		if len(cur.Kvs) > 0 {
			old, err := decodeBroker(cur.Kvs[0].Value, cur.Kvs[0].CreateRevision)
			if err != nil {
				return 0, 0, err
			}
			if old.IncarnationID == info.IncarnationID && info.IncarnationID != "" {
				// The same process again: its epoch and fenced state stay;
				// its listeners may have changed.
				info.Fenced = old.Fenced
				rev, err := c.putIfRev(ctx, l, op, key, info, cur.Kvs[0].ModRevision)
				if errors.Is(err, errRetry) {
					continue
				}
				return old.Epoch, rev, err
			}
			// A new incarnation: the old registration goes first, so
			// the new one gets a new CreateRevision.
			_, err = c.fencedTxn(ctx, l, op, clientv3.Compare(clientv3.ModRevision(key), "=", cur.Kvs[0].ModRevision), clientv3.OpDelete(key))
			if errors.Is(err, errRetry) {
				continue
			}
			if err != nil {
				return 0, 0, err
			}
		}
		info.Fenced = true
		val, err := json.Marshal(info)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", op, err)
		}
		rev, err := c.fencedTxn(ctx, l, op, clientv3.Compare(clientv3.CreateRevision(key), "=", 0), clientv3.OpPut(key, string(val)))
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		return rev, rev, nil
	}
}

// errRetry asks a read-modify-write loop to read again.
var errRetry = errors.New("retry")

// putIfRev writes info at key if the key is still at modRev and l leads.
func (c *Client) putIfRev(ctx context.Context, l *Leadership, op, key string, info BrokerInfo, modRev int64) (int64, error) {
	val, err := json.Marshal(info)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	return c.fencedTxn(ctx, l, op, clientv3.Compare(clientv3.ModRevision(key), "=", modRev), clientv3.OpPut(key, string(val)))
}

// fencedTxn runs then if l still leads and cond holds, and returns the
// write's revision: ErrNotController (wrapped) when l is deposed,
// errRetry when only cond failed (read again).
func (c *Client) fencedTxn(ctx context.Context, l *Leadership, op string, cond clientv3.Cmp, then clientv3.Op) (int64, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).If(l.fence(), cond).Then(then).Else(clientv3.OpGet(l.key)).Commit()
	if err != nil {
		return 0, wrapErr(op, err)
	}
	if !resp.Succeeded {
		if l.deposed((*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())) {
			return 0, l.notController()
		}
		return 0, errRetry
	}
	return resp.Header.Revision, nil
}

// SetBrokerFenced fences or unfences broker id's registration of the given
// epoch. ErrStaleBrokerEpoch when the broker is not registered at that
// epoch; nothing is written when the state is already the one asked.
func (c *Client) SetBrokerFenced(ctx context.Context, l *Leadership, id int32, epoch int64, fenced bool) (rev int64, err error) {
	op := fmt.Sprintf("set broker %d fenced=%v", id, fenced)
	key := brokerKey(id)
	for {
		cctx, cancel := c.callCtx(ctx)
		cur, err := c.cli.Get(cctx, key)
		cancel()
		if err != nil {
			return 0, wrapErr(op, err)
		}
		if len(cur.Kvs) == 0 || cur.Kvs[0].CreateRevision != epoch {
			return 0, fmt.Errorf("%s: epoch %d: %w", op, epoch, ErrStaleBrokerEpoch)
		}
		info, err := decodeBroker(cur.Kvs[0].Value, cur.Kvs[0].CreateRevision)
		if err != nil {
			return 0, err
		}
		if info.Fenced == fenced {
			return cur.Header.Revision, nil
		}
		info.Fenced = fenced
		rev, err := c.putIfRev(ctx, l, op, key, info, cur.Kvs[0].ModRevision)
		if errors.Is(err, errRetry) {
			continue
		}
		return rev, err
	}
}
