package coord

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// session is a lease this client keeps alive: Kafka's ZooKeeper session.
//
// It renews with one short keepalive call every third of the TTL, each
// bounded by that third and refused at once by a member without a leader,
// so a renewal that hangs on a paused or cut-off member is retried on the
// next member (round robin) long before the lease can expire. etcd's own
// keepalive stream would stay on such a member for up to its request
// timeout (7 s), which loses sessions shorter than that (Kafka <= 2.4 used
// 6 s).
type session struct {
	id     clientv3.LeaseID
	ttl    int64
	ctx    context.Context // ends when the session is lost or orphaned
	cancel context.CancelFunc
	done   chan struct{} // closed once the keepalive loop has stopped
}

// newSession grants a lease of ttl seconds and keeps it alive until it is
// lost, orphaned, or the client closes.
func (c *Client) newSession(ctx context.Context, ttl int64) (*session, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	sent := time.Now()
	lease, err := c.cli.Grant(cctx, ttl)
	if err != nil {
		return nil, err
	}
	sctx, scancel := context.WithCancel(c.ctx)
	s := &session{id: lease.ID, ttl: lease.TTL, ctx: sctx, cancel: scancel, done: make(chan struct{})}
	expires := sent.Add(time.Duration(lease.TTL) * time.Second)
	if !c.spawn(func() { c.keepAlive(s, expires) }) {
		scancel()
		close(s.done)
	}
	return s, nil
}

// keepAlive renews s until it expires (no renewal got through in time, or
// the coordinator no longer knows it) or s.ctx ends.
func (c *Client) keepAlive(s *session, expires time.Time) {
	defer close(s.done)
	defer s.cancel()
	interval := time.Duration(s.ttl) * time.Second / 3
	wait := interval
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		left := time.Until(expires)
		if left <= 0 {
			return // lost: the coordinator has expired the lease by now
		}
		actx, cancel := context.WithTimeout(clientv3.WithRequireLeader(s.ctx), min(interval, left))
		sent := time.Now()
		resp, err := c.cli.KeepAliveOnce(actx, s.id)
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			expires = sent.Add(time.Duration(resp.TTL) * time.Second)
			wait = interval
		case err == nil, errors.Is(err, rpctypes.ErrLeaseNotFound):
			return // expired or revoked
		default:
			// Retry soon: the next call goes to the next member.
			wait = min(200*time.Millisecond, interval)
		}
		t.Reset(wait)
	}
}

// Lease is the session's lease.
func (s *session) Lease() clientv3.LeaseID { return s.id }

// Ctx ends when the session is lost or orphaned.
func (s *session) Ctx() context.Context { return s.ctx }

// Done is closed when the session is over and its keepalive has stopped.
func (s *session) Done() <-chan struct{} { return s.done }

// Orphan stops renewing the lease (it expires after its TTL unless
// revoked) and waits for the keepalive loop to stop.
func (s *session) Orphan() {
	s.cancel()
	<-s.done
}
