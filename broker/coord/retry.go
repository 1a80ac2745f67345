package coord

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// retryKV retries writes that a member refused because it has no leader.
// Every call carries WithRequireLeader, so a member cut off from the quorum
// refuses at once, before proposing anything: the write certainly did not
// happen and may go to another member. etcd's client retries reads itself
// but never writes. The next attempt goes to the next endpoint (round
// robin), so a client that knows every member fails over the way a
// ZooKeeper client moves to another server. Other errors, including the
// ambiguous ones (leader changed, timeout), are returned as they are.
type retryKV struct {
	clientv3.KV
}

func (kv retryKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	var resp *clientv3.PutResponse
	err := retryNoLeader(ctx, func() (err error) {
		resp, err = kv.KV.Put(ctx, key, val, opts...)
		return err
	})
	return resp, err
}

func (kv retryKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	var resp *clientv3.DeleteResponse
	err := retryNoLeader(ctx, func() (err error) {
		resp, err = kv.KV.Delete(ctx, key, opts...)
		return err
	})
	return resp, err
}

func (kv retryKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	var resp clientv3.OpResponse
	err := retryNoLeader(ctx, func() (err error) {
		resp, err = kv.KV.Do(ctx, op)
		return err
	})
	return resp, err
}

func (kv retryKV) Txn(ctx context.Context) clientv3.Txn {
	return &retryTxn{kv: kv.KV, ctx: ctx}
}

// retryTxn records a Txn and builds a fresh one for every attempt.
type retryTxn struct {
	kv             clientv3.KV
	ctx            context.Context
	cmps           []clientv3.Cmp
	thens, elses   []clientv3.Op
	ifSet, thenSet bool
	elseSet        bool
}

func (t *retryTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps, t.ifSet = cs, true
	return t
}

func (t *retryTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thens, t.thenSet = ops, true
	return t
}

func (t *retryTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.elses, t.elseSet = ops, true
	return t
}

func (t *retryTxn) Commit() (*clientv3.TxnResponse, error) {
	var resp *clientv3.TxnResponse
	err := retryNoLeader(t.ctx, func() (err error) {
		txn := t.kv.Txn(t.ctx)
		if t.ifSet {
			txn = txn.If(t.cmps...)
		}
		if t.thenSet {
			txn = txn.Then(t.thens...)
		}
		if t.elseSet {
			txn = txn.Else(t.elses...)
		}
		resp, err = txn.Commit()
		return err
	})
	return resp, err
}

// retryNoLeader calls f until it returns anything but "no leader" or ctx
// ends, backing off from 10 ms to 200 ms.
func retryNoLeader(ctx context.Context, f func() error) error {
	d := 10 * time.Millisecond
	for {
		err := f()
		if err == nil || !isNoLeader(err) {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		d = min(2*d, 200*time.Millisecond)
	}
}

func isNoLeader(err error) bool {
	return errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrGRPCNoLeader)
}
