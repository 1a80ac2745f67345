package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// kraftLink is a KRaft broker's link to the controller quorum
// (process.roles=broker, kafka.profile 4.0), Kafka's
// BrokerLifecycleManager: the broker registers with the active controller
// (BrokerRegistration), then heartbeats it every
// broker.heartbeat.interval.ms (BrokerHeartbeat); the controller fences
// it when the heartbeats stop for broker.session.timeout.ms and unfences
// it on its next heartbeat. A controlled shutdown is a heartbeat that
// wants to shut down, repeated until the controller grants it. The broker
// runs no controller; it finds the active one through the coordinators'
// election and sends it AlterPartition and the admin requests that
// belong to the controller.
type kraftLink struct {
	voters      map[int32]string // controller node id -> controller listener
	incarnation [16]byte

	active       atomic.Int32 // the active controller's id, -1 unknown
	fenced       atomic.Bool
	wantShutdown atomic.Bool
	granted      chan struct{} // closed once a shutdown is granted
	grantedOnce  atomic.Bool
	kick         chan struct{} // heartbeat now
}

func newKRaftLink(cfg *kafkaconfig.Config) (*kraftLink, error) {
	k := &kraftLink{voters: map[int32]string{}, granted: make(chan struct{}), kick: make(chan struct{}, 1)}
	for _, v := range cfg.List("controller.quorum.voters") {
		id, addr, err := kafkaconfig.ParseVoter(v)
		if err != nil {
			return nil, fmt.Errorf("controller.quorum.voters: %w", err)
		}
		k.voters[id] = addr
	}
	if len(k.voters) == 0 {
		return nil, errors.New("process.roles=broker needs controller.quorum.voters")
	}
	rand.Read(k.incarnation[:])
	k.active.Store(-1)
	k.fenced.Store(true)
	return k, nil
}

// kraft reports whether the broker runs in KRaft mode.
func (b *Broker) kraft() *kraftLink {
	if b.cluster == nil {
		return nil
	}
	return b.cluster.kraft
}

// controllerTarget is where the controller's requests go: the active
// KRaft controller's listener, or the broker the metadata names as
// controller.
func (b *Broker) controllerTarget() (int32, string, bool) {
	if k := b.kraft(); k != nil {
		id := k.active.Load()
		addr, ok := k.voters[id]
		return id, addr, ok
	}
	id := b.meta.controllerID()
	if c := b.cluster; c != nil && c.ctrl != nil && c.ctrl.Active() {
		id = b.id
	}
	addr, ok := b.meta.brokerAddr(id)
	return id, addr, ok
}

// watchActiveController follows the coordinators' controller election.
func (c *cluster) watchActiveController(ctx context.Context) {
	for ev := range c.coord.WatchController(ctx) {
		if old := c.kraft.active.Swap(ev.BrokerID); old != ev.BrokerID {
			c.b.log.Info("active controller changed", "controller", ev.BrokerID, "controller_epoch", ev.Epoch)
			select {
			case c.kraft.kick <- struct{}{}:
			default:
			}
		}
	}
}

// controllerRequest sends req to the active controller.
func (c *cluster) controllerRequest(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	id, addr, ok := c.b.controllerTarget()
	if !ok {
		return nil, fmt.Errorf("no active controller known (controller %d)", id)
	}
	return c.b.brokerClient(id, addr).Request(ctx, req)
}

// lifecycleLoop registers with the controller quorum and heartbeats until
// ctx ends, registering again whenever the controller no longer knows
// this registration.
func (c *cluster) lifecycleLoop(ctx context.Context) error {
	k := c.kraft
	interval := time.Duration(c.b.cfg.Int("broker.heartbeat.interval.ms")) * time.Millisecond
	prevEpoch := int64(-1) // -1: not shut down cleanly, as Kafka's broker says without a clean-shutdown file
	if !c.b.logs.UncleanShutdown() {
		prevEpoch = 0
	}
	for ctx.Err() == nil {
		epoch, err := c.registerKRaft(ctx, prevEpoch)
		if err != nil {
			return nil // ctx ended
		}
		c.epoch.Store(epoch)
		c.registered = true
		c.b.log.Info("registered with the controller quorum", "broker_epoch", epoch, "controller", k.active.Load())
		c.heartbeatLoop(ctx, epoch, interval)
		prevEpoch = epoch
	}
	return nil
}

func (c *cluster) registerKRaft(ctx context.Context, prevEpoch int64) (int64, error) {
	self := c.b.selfEndpoint()
	req := kmsg.NewPtrBrokerRegistrationRequest()
	req.SetVersion(3)
	req.BrokerID, req.ClusterID, req.IncarnationID, req.PreviousBrokerEpoch = c.b.id, "isrlab", c.kraft.incarnation, prevEpoch
	// The inter-broker listener first: the controller dials it.
	l := kmsg.NewBrokerRegistrationRequestListener()
	l.Name, l.Host, l.Port = c.b.ls.interBroker, self.Host, uint16(self.Port)
	req.Listeners = append(req.Listeners, l)
	for name, hp := range self.Endpoints {
		if name == c.b.ls.interBroker {
			continue
		}
		l := kmsg.NewBrokerRegistrationRequestListener()
		l.Name, l.Host, l.Port = name, hp.Host, uint16(hp.Port)
		req.Listeners = append(req.Listeners, l)
	}
	warned := false
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		raw, err := c.controllerRequest(rctx, req)
		cancel()
		if err == nil {
			resp := raw.(*kmsg.BrokerRegistrationResponse)
			if err = kerr.ErrorForCode(resp.ErrorCode); err == nil {
				return resp.BrokerEpoch, nil
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if !warned {
			c.b.log.Warn("registration with the controller quorum failed; retrying", "err", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.kraft.kick:
		case <-time.After(time.Second):
		}
	}
}

// heartbeatLoop heartbeats until ctx ends or the controller no longer
// knows this registration.
func (c *cluster) heartbeatLoop(ctx context.Context, epoch int64, interval time.Duration) {
	k := c.kraft
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		req := kmsg.NewPtrBrokerHeartbeatRequest()
		req.SetVersion(1)
		req.BrokerID, req.BrokerEpoch, req.WantShutdown = c.b.id, epoch, k.wantShutdown.Load()
		req.CurrentMetadataOffset = 0
		rctx, cancel := context.WithTimeout(ctx, interval+time.Second)
		raw, err := c.controllerRequest(rctx, req)
		cancel()
		if err == nil {
			resp := raw.(*kmsg.BrokerHeartbeatResponse)
			err = kerr.ErrorForCode(resp.ErrorCode)
			switch {
			case errors.Is(err, kerr.StaleBrokerEpoch), errors.Is(err, kerr.BrokerIDNotRegistered):
				c.b.log.Warn("the controller does not know this registration; registering again", "broker_epoch", epoch, "err", err)
				return
			case err == nil:
				if failing {
					c.b.log.Info("heartbeats reach the controller again", "controller", k.active.Load())
					failing = false
				}
				if was := k.fenced.Swap(resp.IsFenced); was != resp.IsFenced {
					c.b.log.Info("fencing changed", "fenced", resp.IsFenced, "broker_epoch", epoch)
				}
				if resp.ShouldShutdown && k.grantedOnce.CompareAndSwap(false, true) {
					close(k.granted)
				}
			}
		}
		if err != nil && !failing && ctx.Err() == nil {
			c.b.log.Warn("heartbeat to the controller failed", "controller", k.active.Load(), "err", err)
			failing = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-k.kick:
		}
	}
}

// kraftControlledShutdown asks the controller, through heartbeats, to
// move this broker's leaderships away, and waits until it grants the
// shutdown or the retries of the ZooKeeper-era controlled shutdown are
// spent.
func (b *Broker) kraftControlledShutdown() {
	k := b.kraft()
	k.wantShutdown.Store(true)
	select {
	case k.kick <- struct{}{}:
	default:
	}
	wait := time.Duration(b.cfg.Int("controlled.shutdown.max.retries")+1) * (time.Duration(b.cfg.Long("controlled.shutdown.retry.backoff.ms"))*time.Millisecond + 10*time.Second)
	select {
	case <-k.granted:
		b.log.Info("controlled shutdown granted by the controller")
	case <-time.After(wait):
		b.log.Warn("controlled shutdown not granted; shutting down anyway", "waited", wait)
	}
}

// forwarder stands in for the controller on a KRaft broker: the requests
// that belong to the controller are forwarded to the active one, as Kafka
// 4 brokers forward them (ForwardingManager), and answered with
// NOT_CONTROLLER when it cannot be reached, which clients retry.
type forwarder struct{ c *cluster }

func (f forwarder) Active() bool { return true }

func (f forwarder) Run(ctx context.Context, _ *coord.Leadership) error {
	return errors.New("a KRaft broker runs no controller")
}

// forward sends req to the active controller and returns its answer, or,
// when it cannot be reached, req's response with code as its error.
func forward[R kmsg.Response](f forwarder, ctx context.Context, req kmsg.Request, code int16, set func(R, int16)) R {
	resp, err := f.c.controllerRequest(ctx, req)
	if err == nil {
		return resp.(R)
	}
	f.c.b.log.Info("forwarding to the controller failed", "api", kmsg.NameForKey(req.Key()), "err", err)
	return refuse(req, code, set)
}

// refuse is req's response with code as its error.
func refuse[R kmsg.Response](req kmsg.Request, code int16, set func(R, int16)) R {
	resp := req.ResponseKind().(R)
	set(resp, code)
	return resp
}

func (f forwarder) ElectLeaders(ctx context.Context, req *kmsg.ElectLeadersRequest) *kmsg.ElectLeadersResponse {
	return forward(f, ctx, req, kerr.NotController.Code, func(r *kmsg.ElectLeadersResponse, c int16) { r.ErrorCode = c })
}

// ControlledShutdown: KRaft brokers shut down under control through
// their heartbeats.
func (f forwarder) ControlledShutdown(ctx context.Context, req *kmsg.ControlledShutdownRequest) *kmsg.ControlledShutdownResponse {
	return refuse(req, kerr.UnsupportedVersion.Code, func(r *kmsg.ControlledShutdownResponse, c int16) { r.ErrorCode = c })
}

// AlterPartition: leaders send it to the controller, never to a broker.
func (f forwarder) AlterPartition(ctx context.Context, req *kmsg.AlterPartitionRequest) *kmsg.AlterPartitionResponse {
	return refuse(req, kerr.NotController.Code, func(r *kmsg.AlterPartitionResponse, c int16) { r.ErrorCode = c })
}

func (f forwarder) AlterPartitionReassignments(ctx context.Context, req *kmsg.AlterPartitionAssignmentsRequest) *kmsg.AlterPartitionAssignmentsResponse {
	return forward(f, ctx, req, kerr.NotController.Code, func(r *kmsg.AlterPartitionAssignmentsResponse, c int16) { r.ErrorCode = c })
}

func (f forwarder) ListPartitionReassignments(ctx context.Context, req *kmsg.ListPartitionReassignmentsRequest) *kmsg.ListPartitionReassignmentsResponse {
	return forward(f, ctx, req, kerr.NotController.Code, func(r *kmsg.ListPartitionReassignmentsResponse, c int16) { r.ErrorCode = c })
}
