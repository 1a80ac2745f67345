package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BrokerInfo is the registration of a live broker, stored as JSON at
// /brokers/ids/<id>.
type BrokerInfo struct {
	ID   int32  `json:"id"`
	Host string `json:"host"`
	Port int32  `json:"port"`
	// Endpoints are listener URLs such as "PLAINTEXT://10.0.0.1:9092".
	Endpoints []string `json:"endpoints,omitempty"`
	Rack      string   `json:"rack,omitempty"`
	// Timestamp is the registration time in Unix milliseconds, as Kafka
	// writes it; informational only.
	Timestamp int64 `json:"timestamp,omitempty"`
	// UncleanShutdown is set on the first registration of a broker
	// process whose log dirs were not shut down cleanly: the controller
	// removes it from every ELR (KIP-966; KRaft's new incarnation without
	// a clean shutdown).
	UncleanShutdown bool `json:"unclean_shutdown,omitempty"`
	// Fenced is set by a KRaft controller on a broker whose heartbeats
	// stopped or that registered and has not asked to be unfenced yet
	// (Kafka's FenceBrokerRecord): the broker is registered but not
	// live. Never set in the ZooKeeper era, where a registration lives
	// on its session.
	Fenced bool `json:"fenced,omitempty"`
	// IncarnationID tells a KRaft broker's processes apart: a
	// registration from a new incarnation gets a new epoch, one from the
	// same keeps it (a registration retried after a lost answer).
	IncarnationID string `json:"incarnation_id,omitempty"`

	// Epoch is the broker epoch (KIP-380): the CreateRevision of the
	// registration key. Filled in on reads, not stored.
	Epoch int64 `json:"-"`
}

// Registration is a broker's live session. Its key disappears when the
// lease expires (the broker stopped renewing it for the session timeout) or
// Close revokes it.
type Registration struct {
	c       *Client
	info    BrokerInfo
	session *session
	ttl     int64
	once    sync.Once
	err     error
}

// RegisterBroker creates /brokers/ids/<info.ID> on a new lease whose TTL is
// sessionTimeout (0 means the client's default, 18 s) and keeps the lease
// alive in the background. If the id is held by a live session it returns a
// *BrokerIDInUseError (errors.Is ErrBrokerIDInUse); after a crash the old
// registration stays until its session times out, so callers retry.
func (c *Client) RegisterBroker(ctx context.Context, info BrokerInfo, sessionTimeout time.Duration) (*Registration, error) {
	if sessionTimeout <= 0 {
		sessionTimeout = c.sessionTimeout
	}
	if info.Timestamp == 0 {
		info.Timestamp = time.Now().UnixMilli()
	}
	val, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("register broker %d: %w", info.ID, err)
	}
	ttl := ttlSeconds(sessionTimeout)
	session, err := c.newSession(ctx, ttl)
	if err != nil {
		return nil, wrapErr(fmt.Sprintf("register broker %d", info.ID), err)
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	key := brokerKey(info.ID)
	resp, err := c.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(session.Lease()))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		c.revoke(session, ttl)
		return nil, wrapErr(fmt.Sprintf("register broker %d", info.ID), err)
	}
	if !resp.Succeeded {
		c.revoke(session, ttl)
		e := &BrokerIDInUseError{ID: info.ID}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			e.Epoch = kvs[0].CreateRevision
		}
		return nil, fmt.Errorf("register broker %d: %w", info.ID, e)
	}
	info.Epoch = resp.Header.Revision
	return &Registration{c: c, info: info, session: session, ttl: ttl}, nil
}

// revoke ends a session and revokes its lease, bounded by the call
// timeout. If the coordinator cannot be reached it keeps trying in the
// background until the lease would have expired anyway, so that keys on
// the lease (a registration, a controller candidacy) go as soon as the
// coordinator is back rather than a session timeout later.
func (c *Client) revoke(s *session, ttl int64) error {
	s.Orphan()
	try := func(ctx context.Context) error {
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		_, err := c.cli.Revoke(cctx, s.Lease())
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil // expired or revoked already
		}
		return err
	}
	err := try(context.Background())
	if err == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, time.Duration(ttl)*time.Second)
	if !c.spawn(func() {
		defer cancel()
		b := newBackoff()
		for b.wait(ctx) {
			if try(ctx) == nil {
				return
			}
		}
	}) {
		cancel()
	}
	return err
}

// Info returns the registered broker info with its Epoch.
func (r *Registration) Info() BrokerInfo { return r.info }

// Epoch is the broker epoch: the CreateRevision of the registration key.
func (r *Registration) Epoch() int64 { return r.info.Epoch }

// Done is closed when the session is lost: the lease expired (no renewal
// reached the coordinator for the session timeout), was revoked, or the
// client closed. The broker then registers again and gets a larger epoch.
func (r *Registration) Done() <-chan struct{} { return r.session.Done() }

// Close revokes the lease, deleting the registration (a clean shutdown).
// It is idempotent. If the coordinator cannot be reached it returns
// ErrNoQuorum and keeps trying in the background until the lease would
// have expired anyway.
func (r *Registration) Close() error {
	r.once.Do(func() {
		r.err = wrapErr(fmt.Sprintf("deregister broker %d", r.info.ID), r.c.revoke(r.session, r.ttl))
	})
	return r.err
}

// Broker reads one registration; ok is false when the broker is not live.
func (c *Client) Broker(ctx context.Context, id int32) (info BrokerInfo, ok bool, err error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, brokerKey(id))
	if err != nil {
		return BrokerInfo{}, false, wrapErr(fmt.Sprintf("get broker %d", id), err)
	}
	if len(resp.Kvs) == 0 {
		return BrokerInfo{}, false, nil
	}
	info, err = decodeBroker(resp.Kvs[0].Value, resp.Kvs[0].CreateRevision)
	if err != nil {
		return BrokerInfo{}, false, err
	}
	return info, true, nil
}

// Brokers lists the live brokers sorted by id, each with its Epoch.
func (c *Client) Brokers(ctx context.Context) ([]BrokerInfo, error) {
	bs, _, err := c.brokers(ctx)
	return bs, err
}

func (c *Client) brokers(ctx context.Context) ([]BrokerInfo, int64, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, brokerIDsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, wrapErr("list brokers", err)
	}
	out := make([]BrokerInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		info, err := decodeBroker(kv.Value, kv.CreateRevision)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, resp.Header.Revision, nil
}

func decodeBroker(val []byte, createRev int64) (BrokerInfo, error) {
	var info BrokerInfo
	if err := json.Unmarshal(val, &info); err != nil {
		return BrokerInfo{}, fmt.Errorf("decode broker registration: %w", err)
	}
	info.Epoch = createRev
	return info, nil
}

// BrokersEvent is a snapshot of the live brokers at Revision.
type BrokersEvent struct {
	Brokers  []BrokerInfo
	Revision int64
}

// WatchBrokers delivers a snapshot of the live brokers at once and a fresh
// one after every change (registration, expiry, re-registration). Slow
// readers see only the newest snapshot. The channel closes when ctx ends or
// the client closes.
func (c *Client) WatchBrokers(ctx context.Context) <-chan BrokersEvent {
	return watchSnapshots(c, ctx, "watch brokers", []string{brokerIDsPrefix}, nil,
		func(ctx context.Context) (BrokersEvent, int64, error) {
			bs, rev, err := c.brokers(ctx)
			return BrokersEvent{Brokers: bs, Revision: rev}, rev, err
		},
		func(a, b BrokersEvent) bool { return reflect.DeepEqual(a.Brokers, b.Brokers) })
}
