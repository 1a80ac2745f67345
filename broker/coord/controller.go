package coord

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leadership is a won controller election. Its Epoch fences every write
// made with it: once the election key is gone (resigned, lease expired) or
// replaced, those writes fail with ErrNotController.
type Leadership struct {
	c          *Client
	brokerID   int32
	session    *session
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
// no default timeout: waiting is its job, through coordinator outages too
// (it fails with ErrSessionLost if its session expires meanwhile). Prefer
// Registration.Campaign, which ties the controller to the broker's own
// session as in Kafka.
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

// campaign runs Kafka's controller election on etcd: every candidate puts
// /controller/<lease> on its session's lease; the oldest key (lowest
// CreateRevision) leads, and a candidate wins when every older key is gone.
// Transient coordinator errors while waiting are retried; losing the
// session or ctx ends the campaign and removes the candidate key.
func (c *Client) campaign(ctx context.Context, s *session, brokerID int32, ttl int64, own bool) (*Leadership, error) {
	op := fmt.Sprintf("campaign for controller as broker %d", brokerID)
	key := fmt.Sprintf("%s/%x", controllerPrefix, s.Lease())
	val := strconv.FormatInt(int64(brokerID), 10)
	// Create the candidate key, or adopt it if this session has one. The
	// Txn is idempotent, so a timeout (no quorum) is retried until ctx or
	// the session ends.
	var resp *clientv3.TxnResponse
	for b := newBackoff(); ; {
		if s.Ctx().Err() != nil {
			return nil, fmt.Errorf("%s: %w", op, ErrSessionLost)
		}
		cctx, cancel := c.callCtx(ctx)
		var err error
		resp, err = c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, val, clientv3.WithLease(s.Lease()))).
			Else(clientv3.OpGet(key)).
			Commit()
		cancel()
		if err == nil {
			break
		}
		if !isNoQuorum(err) || ctx.Err() != nil || c.ctx.Err() != nil || !b.wait(ctx) {
			return nil, wrapErr(op, err)
		}
	}
	rev := resp.Header.Revision
	if !resp.Succeeded { // this session already campaigns: adopt its key
		rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	}
	withdraw := func() { c.deleteCandidate(context.Background(), s, key, rev) }

	// Wait, giving up when the session is lost: a campaign on a dead lease
	// could otherwise "win" after its own key expired.
	wctx, wcancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.Ctx(), wcancel)
	err := c.waitOlderGone(wctx, rev)
	stop()
	wcancel()
	if err != nil {
		withdraw()
		if s.Ctx().Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("%s: %w", op, ErrSessionLost)
		}
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	l := &Leadership{
		c: c, brokerID: brokerID, session: s, ownSession: own, ttl: ttl,
		key: key, rev: rev, done: make(chan struct{}),
	}
	// Confirm the key still exists with our revision: the wait may have
	// ended because our own lease expired.
	gctx, gcancel := c.callCtx(ctx)
	gresp, err := c.cli.Get(gctx, key)
	gcancel()
	if err != nil {
		withdraw()
		return nil, wrapErr(op, err)
	}
	if l.deposed(gresp) {
		return nil, fmt.Errorf("%s: %w", op, ErrSessionLost)
	}
	mctx, mcancel := context.WithCancel(c.ctx)
	l.cancel = mcancel
	l.wg.Add(1)
	if !c.spawn(func() {
		defer l.wg.Done()
		l.monitor(mctx, gresp.Header.Revision+1)
	}) {
		l.wg.Done()
		close(l.done) // the client is closing: the leadership ends with it
	}
	return l, nil
}

// deleteCandidate removes an election key (if it still has revision rev).
// If the coordinator cannot be reached it keeps trying in the background
// for as long as the session lives: a key left behind on a live session
// would block the election, or name a controller that no longer acts.
func (c *Client) deleteCandidate(ctx context.Context, s *session, key string, rev int64) error {
	del := func(ctx context.Context) error {
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		_, err := c.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
		return err
	}
	err := del(ctx)
	if err == nil {
		return nil
	}
	bctx, cancel := context.WithCancel(c.ctx)
	stop := context.AfterFunc(s.Ctx(), cancel)
	if !c.spawn(func() {
		defer stop()
		defer cancel()
		b := newBackoff()
		for b.wait(bctx) {
			if del(bctx) == nil {
				return
			}
		}
	}) {
		stop()
		cancel()
	}
	return err
}

// waitOlderGone returns once no election key older than rev exists, or
// ctx.Err(). Coordinator errors are retried with backoff: waiting through
// a quorum loss is part of campaigning.
func (c *Client) waitOlderGone(ctx context.Context, rev int64) error {
	b := newBackoff()
	for {
		gctx, gcancel := c.callCtx(ctx)
		resp, err := c.cli.Get(gctx, controllerPrefix+"/",
			append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...)
		gcancel()
		if err != nil {
			if !b.wait(ctx) {
				return ctx.Err()
			}
			continue
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		// Wait for the youngest older candidate to go, then look again.
		older := string(resp.Kvs[0].Key)
		deleted := c.waitDeleted(ctx, older, resp.Header.Revision+1)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if deleted {
			b.reset()
		} else if !b.wait(ctx) { // the watch broke: back off, then re-read
			return ctx.Err()
		}
	}
}

// waitDeleted watches key from rev and reports whether it was deleted;
// false means ctx ended or the watch broke.
func (c *Client) waitDeleted(ctx context.Context, key string, rev int64) bool {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range c.cli.Watch(ctx, key, clientv3.WithRev(rev)) {
		if wr.Err() != nil {
			return false
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return true
			}
		}
	}
	return false
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
		// The watch requires a leader: a member cut off from the quorum ends
		// it instead of keeping it silent, and the key is checked elsewhere.
		if l.c.waitDeleted(ctx, l.key, rev) || ctx.Err() != nil {
			return
		}
		// The watch broke (compaction, no leader): check the key itself.
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
// If the coordinator cannot be reached it returns the error and keeps
// trying in the background, so the key goes as soon as the coordinator is
// back. Writes fenced on l fail once Resign returns, whatever its error.
// It is idempotent.
func (l *Leadership) Resign(ctx context.Context) error {
	l.once.Do(func() {
		err := l.c.deleteCandidate(ctx, l.session, l.key, l.rev)
		l.cancel()
		l.wg.Wait()
		if l.ownSession {
			err = errors.Join(err, l.c.revoke(l.session, l.ttl))
		}
		l.err = wrapErr(fmt.Sprintf("resign controller %d", l.brokerID), err)
	})
	return l.err
}

// over reports whether l has ended (Done is closed): fenced writes then
// fail at once, without asking the coordinator.
func (l *Leadership) over() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// notController is the error of a write fenced on a leadership that ended.
func (l *Leadership) notController() error {
	return fmt.Errorf("controller %d epoch %d: %w", l.brokerID, l.rev, ErrNotController)
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
	return watchSnapshots(c, ctx, "watch controller", []string{controllerPrefix + "/"}, nil, c.controller,
		func(a, b ControllerEvent) bool { return a.BrokerID == b.BrokerID && a.Epoch == b.Epoch })
}
