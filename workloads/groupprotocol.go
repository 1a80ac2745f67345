package workloads

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// GroupProtocolOpts returns the kgo options of the group protocol that a
// franz-go client's Kafka-named settings ask for: group.protocol classic
// (the default; no options) or consumer (KIP-848: kgo.ServerSideBalancer),
// and with consumer group.remote.assignor uniform (the default) or range,
// the broker's assignor. Other keys are left to the caller. The queue
// workload's members and the txn workload's group sessions take them.
func GroupProtocolOpts(clientConfig map[string]string) ([]kgo.Opt, error) {
	switch p := clientConfig["group.protocol"]; p {
	case "", "classic":
		if a := clientConfig["group.remote.assignor"]; a != "" {
			return nil, fmt.Errorf("group.remote.assignor %s needs group.protocol consumer", a)
		}
		return nil, nil
	case "consumer":
		// kgo asks the broker for uniform with its sticky balancer and
		// for range with its range balancer.
		balancer := kgo.StickyBalancer()
		switch a := clientConfig["group.remote.assignor"]; a {
		case "", "uniform":
		case "range":
			balancer = kgo.RangeBalancer()
		default:
			return nil, fmt.Errorf("group.remote.assignor %q: use uniform or range", a)
		}
		return []kgo.Opt{kgo.Balancers(balancer), kgo.ServerSideBalancer()}, nil
	default:
		return nil, fmt.Errorf("group.protocol %q: use classic or consumer", p)
	}
}

// TxnGroupProtocolOpts is GroupProtocolOpts for the txn workload of c: the
// protocol is that of the group its transactional producers read in, so
// group.protocol consumer needs txn.group.id (without it no client of the
// workload is a group member).
func (c Config) TxnGroupProtocolOpts(clientConfig map[string]string) ([]kgo.Opt, error) {
	opts, err := GroupProtocolOpts(clientConfig)
	if err != nil {
		return nil, err
	}
	if opts != nil && c.TxnGroup == "" {
		return nil, errors.New("group.protocol consumer: the txn workload is in a consumer group only with txn.group.id (read-process-write in a group); without it no client of the workload joins a group")
	}
	return opts, nil
}
