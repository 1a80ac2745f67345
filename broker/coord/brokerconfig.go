package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// brokerConfigKey is where Kafka keeps dynamic broker configs in
// ZooKeeper: /config/brokers/<id> for one broker, /config/brokers/<default>
// for the cluster-wide defaults (id nil).
func brokerConfigKey(id *int32) string {
	if id == nil {
		return "/config/brokers/" + quotaDefault
	}
	return "/config/brokers/" + strconv.FormatInt(int64(*id), 10)
}

// BrokerConfig reads the dynamic configs of broker *id, or the cluster-wide
// dynamic defaults when id is nil; empty when none are set.
func (c *Client) BrokerConfig(ctx context.Context, id *int32) (map[string]string, error) {
	key := brokerConfigKey(id)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, key)
	if err != nil {
		return nil, wrapErr("read broker config "+key, err)
	}
	if len(resp.Kvs) == 0 {
		return map[string]string{}, nil
	}
	return decodeBrokerConfig(key, resp.Kvs[0].Value)
}

func decodeBrokerConfig(key string, val []byte) (map[string]string, error) {
	var qj quotaJSON // the same {"version":1,"config":{...}} entity format
	if err := json.Unmarshal(val, &qj); err != nil {
		return nil, fmt.Errorf("decode broker config %s: %w", key, err)
	}
	if qj.Config == nil {
		qj.Config = map[string]string{}
	}
	return qj.Config, nil
}

// UpdateBrokerConfig replaces the dynamic configs of broker *id (nil: the
// cluster-wide defaults) with what update returns for the current ones,
// by a compare-and-swap retried when another writer won, deleting the key
// when nothing is left. An error from update is returned as it is.
func (c *Client) UpdateBrokerConfig(ctx context.Context, id *int32, update func(current map[string]string) (map[string]string, error)) error {
	key := brokerConfigKey(id)
	return c.updateEntity(ctx, key, "update broker config "+key, func(v []byte) (map[string]string, error) { return decodeBrokerConfig(key, v) }, update)
}

// updateEntity replaces the config map stored at key (a quotaJSON: broker
// configs, a user's quotas and SCRAM credentials) with what update returns
// for the current one (decoded by decode), by a compare-and-swap retried
// when another writer won, deleting the key when nothing is left. An error
// from decode or update is returned as it is.
func (c *Client) updateEntity(ctx context.Context, key, op string, decode func([]byte) (map[string]string, error), update func(current map[string]string) (map[string]string, error)) error {
	for attempt := 0; ; attempt++ {
		cctx, cancel := c.callCtx(ctx)
		resp, err := c.cli.Get(cctx, key)
		cancel()
		if err != nil {
			return wrapErr(op, err)
		}
		cur := map[string]string{}
		var rev int64
		if len(resp.Kvs) > 0 {
			rev = resp.Kvs[0].ModRevision
			if cur, err = decode(resp.Kvs[0].Value); err != nil {
				return err
			}
		}
		next, err := update(cur)
		if err != nil {
			return err
		}
		write := clientv3.OpDelete(key)
		if len(next) > 0 {
			b, err := json.Marshal(quotaJSON{Version: 1, Config: next})
			if err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
			write = clientv3.OpPut(key, string(b))
		}
		cctx, cancel = c.callCtx(ctx)
		tr, err := c.cli.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(write).Commit()
		cancel()
		if err != nil {
			return wrapErr(op, err)
		}
		if tr.Succeeded {
			return nil
		}
		if attempt >= 10 {
			return fmt.Errorf("%s: %w", op, ErrTopicChanged)
		}
	}
}
