package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// ISRChangeNotification is one /isr_change_notification entry: partitions
// whose ISR a leader changed (Kafka <= 2.6 propagates these lazily).
type ISRChangeNotification struct {
	// Key identifies the entry for DeleteISRChangeNotifications.
	Key        string           `json:"key"`
	Partitions []TopicPartition `json:"partitions"`
	// Revision is the entry's CreateRevision; entries list in this order.
	Revision int64 `json:"revision"`
}

type isrChangeJSON struct {
	Version    int              `json:"version"`
	Partitions []TopicPartition `json:"partitions"`
}

// NotifyISRChange records that the caller (a partition leader) changed the
// ISR of these partitions, for the controller to pick up.
func (c *Client) NotifyISRChange(ctx context.Context, partitions []TopicPartition) error {
	if len(partitions) == 0 {
		return nil
	}
	val, err := json.Marshal(isrChangeJSON{Version: 1, Partitions: partitions})
	if err != nil {
		return fmt.Errorf("notify isr change: %w", err)
	}
	// etcd has no sequential nodes: a random suffix keeps keys unique and
	// CreateRevision gives the order.
	var b [8]byte
	rand.Read(b[:])
	key := isrChangeSeqPrefix + hex.EncodeToString(b[:])
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	if _, err := c.cli.Put(cctx, key, string(val)); err != nil {
		return wrapErr("notify isr change", err)
	}
	return nil
}

// ISRChangeNotifications lists the pending notifications, oldest first.
func (c *Client) ISRChangeNotifications(ctx context.Context) ([]ISRChangeNotification, error) {
	ev, _, err := c.isrChanges(ctx)
	return ev.Notifications, err
}

// ISRChangesEvent is the set of pending notifications at Revision.
type ISRChangesEvent struct {
	Notifications []ISRChangeNotification
	Revision      int64
}

func (c *Client) isrChanges(ctx context.Context) (ISRChangesEvent, int64, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, isrChangePrefix, clientv3.WithPrefix())
	if err != nil {
		return ISRChangesEvent{}, 0, wrapErr("list isr change notifications", err)
	}
	out := make([]ISRChangeNotification, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var n isrChangeJSON
		if err := json.Unmarshal(kv.Value, &n); err != nil {
			return ISRChangesEvent{}, 0, fmt.Errorf("decode isr change notification %s: %w", kv.Key, err)
		}
		out = append(out, ISRChangeNotification{Key: string(kv.Key), Partitions: n.Partitions, Revision: kv.CreateRevision})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return ISRChangesEvent{Notifications: out, Revision: resp.Header.Revision}, resp.Header.Revision, nil
}

// WatchISRChangeNotifications delivers the pending notifications at once and
// again whenever a new one is written (deletions do not trigger it).
// Latest-wins; closes when ctx ends or the client closes.
func (c *Client) WatchISRChangeNotifications(ctx context.Context) <-chan ISRChangesEvent {
	puts := func(ev *clientv3.Event) bool { return ev.Type == mvccpb.PUT }
	return watchSnapshots(c, ctx, "watch isr changes", []string{isrChangePrefix}, puts, c.isrChanges,
		func(a, b ISRChangesEvent) bool { return reflect.DeepEqual(a.Notifications, b.Notifications) })
}

// DeleteISRChangeNotifications removes processed notifications, fenced on l
// (nil: unfenced). Deleting a missing key is not an error.
func (c *Client) DeleteISRChangeNotifications(ctx context.Context, l *Leadership, keys []string) error {
	if l != nil && l.over() {
		return fmt.Errorf("delete isr change notifications: %w", l.notController())
	}
	const chunk = MaxTxnOps
	for start := 0; start < len(keys); start += chunk {
		end := min(start+chunk, len(keys))
		ops := make([]clientv3.Op, 0, end-start)
		for _, k := range keys[start:end] {
			if !strings.HasPrefix(k, isrChangeSeqPrefix) {
				return fmt.Errorf("delete isr change notifications: %q is not a notification key", k)
			}
			ops = append(ops, clientv3.OpDelete(k))
		}
		var cmps []clientv3.Cmp
		if l != nil {
			cmps = append(cmps, l.fence())
		}
		cctx, cancel := c.callCtx(ctx)
		resp, err := c.cli.Txn(cctx).If(cmps...).Then(ops...).Commit()
		cancel()
		if err != nil {
			return wrapErr("delete isr change notifications", err)
		}
		if !resp.Succeeded {
			return fmt.Errorf("delete isr change notifications: %w", l.notController())
		}
	}
	return nil
}
