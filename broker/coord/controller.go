package coord

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Leadership is a won controller election. Its Epoch fences every write
// made with it: once the election key is gone (resigned, lease expired) or
// replaced, those writes fail with ErrNotController.
type Leadership struct {
	c          *Client
	brokerID   int32
	election   *concurrency.Election
	session    *concurrency.Session
	ownSession bool
	ttl        int64
	key        string
	rev        int64

	done   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// Campaign blocks until brokerID is elected controller or ctx ends, on a new
// session with the client's session timeout. Unlike other calls it applies
// no default timeout: waiting is its job. Prefer Registration.Campaign,
// which ties the controller to the broker's own session as in Kafka.
func (c *Client) Campaign(ctx context.Context, brokerID int32) (*Leadership, error) {
	ttl := ttlSeconds(c.sessionTimeout)
	s, err := c.newSession(ctx, ttl)
	if err != nil {
		return nil, wrapErr(fmt.Sprintf("campaign for controller as broker %d", brokerID), err)
	}
	l, err := c.campaign(ctx, s, brokerID, ttl, true)
	if err != nil {
		c.revoke(s, ttl)
		return nil, err
	}
	return l, nil
}

// Campaign blocks until this broker is elected controller or ctx ends. The
// election key is attached to the registration's lease, so losing the
// broker session also ends the leadership.
func (r *Registration) Campaign(ctx context.Context) (*Leadership, error) {
	return r.c.campaign(ctx, r.session, r.info.ID, r.ttl, false)
}

func (c *Client) campaign(ctx context.Context, s *concurrency.Session, brokerID int32, ttl int64, own bool) (*Leadership, error) {
	op := fmt.Sprintf("campaign for controller as broker %d", brokerID)
	// Give up when the session is lost: a campaign on a dead lease could
	// otherwise "win" after its own key expired.
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.Ctx(), cancel)
	defer stop()
	defer cancel()
	e := concurrency.NewElection(s, controllerPrefix)
	if err := e.Campaign(cctx, strconv.FormatInt(int64(brokerID), 10)); err != nil {
		if s.Ctx().Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("%s: %w", op, ErrSessionLost)
		}
		return nil, wrapErr(op, err)
	}
	l := &Leadership{
		c: c, brokerID: brokerID, election: e, session: s, ownSession: own, ttl: ttl,
		key: e.Key(), rev: e.Rev(), done: make(chan struct{}),
	}
	// Confirm the key still exists with our revision: the wait for older
	// candidates may have ended because our own lease expired.
	gctx, gcancel := c.callCtx(ctx)
	resp, err := c.cli.Get(gctx, l.key)
	gcancel()
	if err != nil {
		rctx, rcancel := c.callCtx(context.Background())
		e.Resign(rctx)
		rcancel()
		return nil, wrapErr(op, err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev {
		return nil, fmt.Errorf("%s: %w", op, ErrSessionLost)
	}
	mctx, mcancel := context.WithCancel(c.ctx)
	l.cancel = mcancel
	l.wg.Add(1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer l.wg.Done()
		l.monitor(mctx, resp.Header.Revision+1)
	}()
	return l, nil
}

// monitor closes done when the election key is deleted, the session ends,
// the leadership is resigned, or the client closes.
func (l *Leadership) monitor(ctx context.Context, rev int64) {
	defer close(l.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(l.session.Ctx(), cancel)
	defer stop()
	b := newBackoff()
	for ctx.Err() == nil {
		// RequireLeader: a member cut off from the quorum ends the watch
		// instead of keeping it silent; the key is then checked elsewhere.
		wch := l.c.cli.Watch(clientv3.WithRequireLeader(ctx), l.key, clientv3.WithRev(rev))
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					return
				}
			}
			rev = resp.Header.Revision + 1
		}
		if ctx.Err() != nil {
			return
		}
		// The watch broke (compaction, cancellation): check the key itself.
		gctx, gcancel := l.c.callCtx(ctx)
		resp, err := l.c.cli.Get(gctx, l.key)
		gcancel()
		if err == nil {
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev {
				return
			}
			rev = resp.Header.Revision + 1
		}
		if !b.wait(ctx) {
			return
		}
	}
}

// BrokerID is the elected broker.
func (l *Leadership) BrokerID() int32 { return l.brokerID }

// Epoch is the controller epoch: the election key's CreateRevision.
func (l *Leadership) Epoch() int64 { return l.rev }

// Done is closed when the leadership ends: resigned, session lost, election
// key deleted, or client closed. Writes fenced on it fail from then on (a
// write may fail with ErrNotController before Done is observed).
func (l *Leadership) Done() <-chan struct{} { return l.done }

// Resign gives up the leadership (deleting the election key so another
// candidate wins at once) and, for a Client.Campaign, revokes its session.
// It is idempotent.
func (l *Leadership) Resign(ctx context.Context) error {
	l.once.Do(func() {
		cctx, cancel := l.c.callCtx(ctx)
		defer cancel()
		err := l.election.Resign(cctx)
		l.cancel()
		l.wg.Wait()
		if l.ownSession {
			err = errors.Join(err, l.c.revoke(l.session, l.ttl))
		}
		l.err = wrapErr(fmt.Sprintf("resign controller %d", l.brokerID), err)
	})
	return l.err
}

// fence is the Txn condition that l is still the controller.
func (l *Leadership) fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// fenced reports whether the Get of l's key (a Txn's Else) shows l deposed.
func (l *Leadership) deposed(r *clientv3.GetResponse) bool {
	return len(r.Kvs) == 0 || r.Kvs[0].CreateRevision != l.rev
}

// Controller reads who is controller now and its epoch; ErrNoController
// when nobody is elected.
func (c *Client) Controller(ctx context.Context) (brokerID int32, epoch int64, err error) {
	ev, _, err := c.controller(ctx)
	if err != nil {
		return -1, 0, err
	}
	if ev.BrokerID < 0 {
		return -1, 0, fmt.Errorf("get controller: %w", ErrNoController)
	}
	return ev.BrokerID, ev.Epoch, nil
}

// ControllerEvent is the controller at Revision; BrokerID is -1 when none.
type ControllerEvent struct {
	BrokerID int32
	Epoch    int64
	Revision int64
}

func (c *Client) controller(ctx context.Context) (ControllerEvent, int64, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, controllerPrefix+"/", append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
	if err != nil {
		return ControllerEvent{}, 0, wrapErr("get controller", err)
	}
	ev := ControllerEvent{BrokerID: -1, Revision: resp.Header.Revision}
	if len(resp.Kvs) > 0 {
		id, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 32)
		if err != nil {
			return ControllerEvent{}, 0, fmt.Errorf("get controller: bad election value %q: %w", resp.Kvs[0].Value, err)
		}
		ev.BrokerID, ev.Epoch = int32(id), resp.Kvs[0].CreateRevision
	}
	return ev, resp.Header.Revision, nil
}

// WatchController delivers the current controller at once and again after
// every change of the election. Latest-wins; closes when ctx ends or the
// client closes.
func (c *Client) WatchController(ctx context.Context) <-chan ControllerEvent {
	return watchSnapshots(c, ctx, "watch controller", []string{controllerPrefix + "/"}, nil, c.controller)
}
