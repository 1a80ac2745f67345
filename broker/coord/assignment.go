package coord

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SetTopicAssignment rewrites /brokers/topics/<t> with spec's assignment
// and, while a reassignment is in progress, its adding and removing
// replicas. The controller writes it fenced on l during a reassignment;
// an admin write (CreatePartitions, like Kafka's AdminZkClient.addPartitions)
// passes nil. expectedVersion, when not 0, must be the topic's current
// Version (ErrTopicChanged otherwise), so an admin change cannot overwrite
// a reassignment it did not see. Returns the new Version.
func (c *Client) SetTopicAssignment(ctx context.Context, l *Leadership, spec TopicSpec, expectedVersion int64) (int64, error) {
	op := fmt.Sprintf("set assignment of topic %s", spec.Name)
	if err := validateSpec(spec, nil); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	for field, m := range map[string]map[int32][]int32{"adding": spec.Adding, "removing": spec.Removing} {
		for p := range m {
			if _, ok := spec.Assignment[p]; !ok {
				return 0, fmt.Errorf("%s: %w: %s replicas for unassigned partition %d", op, ErrInvalidTopic, field, p)
			}
		}
	}
	val, err := encodeTopicSpec(spec)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	key := topicKey(spec.Name)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), ">", 0)}
	if expectedVersion != 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", expectedVersion))
	}
	var elses []clientv3.Op
	if l != nil {
		if l.over() {
			return 0, fmt.Errorf("%s: %w", op, l.notController())
		}
		cmps = append([]clientv3.Cmp{l.fence()}, cmps...)
		elses = append(elses, clientv3.OpGet(l.key))
	}
	elses = append(elses, clientv3.OpGet(key))
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).If(cmps...).Then(clientv3.OpPut(key, val)).Else(elses...).Commit()
	if err != nil {
		return 0, wrapErr(op, err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	rs := resp.Responses
	if l != nil {
		if l.deposed((*clientv3.GetResponse)(rs[0].GetResponseRange())) {
			return 0, fmt.Errorf("%s: %w", op, l.notController())
		}
		rs = rs[1:]
	}
	kvs := rs[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return 0, fmt.Errorf("%s: %w", op, ErrTopicNotFound)
	}
	return 0, fmt.Errorf("%s: %w: version %d, expected %d", op, ErrTopicChanged, kvs[0].ModRevision, expectedVersion)
}
