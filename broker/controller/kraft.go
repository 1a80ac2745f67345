package controller

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
)

// The KRaft era's broker lifecycle (kafka.profile 4.0), as Kafka's
// ClusterControlManager and BrokerHeartbeatManager run it on the active
// controller: a broker registers (BrokerRegistration) and is fenced until
// its first heartbeat that asks to be unfenced; a broker whose heartbeats
// stop for broker.session.timeout.ms is fenced; a heartbeat that wants to
// shut down starts a controlled shutdown, answered ShouldShutdown once the
// broker leads nothing, and the broker is then fenced. A fenced broker is
// registered but not live: the controller's failover and election logic
// treats it as the ZooKeeper era treats a broker whose session lapsed.
//
// One difference from Kafka: a KRaft broker asks to be unfenced once it has
// replayed the metadata log up to its registration record; here metadata
// is pushed by the controller (LeaderAndIsr, UpdateMetadata) to a broker as
// it becomes live, so the first heartbeat that does not ask to stay fenced
// unfences it.

// liveOf keeps the registrations of bs for the heartbeat bookkeeping and
// returns the live ones: all of them in the ZooKeeper era, the unfenced
// ones in KRaft mode.
func (t *term) liveOf(bs []coord.BrokerInfo) []coord.BrokerInfo {
	if !t.c.cfg.KRaft {
		return bs
	}
	reg := make(map[int32]coord.BrokerInfo, len(bs))
	live := make([]coord.BrokerInfo, 0, len(bs))
	for _, b := range bs {
		reg[b.ID] = b
		if old, ok := t.registered[b.ID]; !ok || old.Epoch != b.Epoch {
			t.lastContact[b.ID] = t.c.cfg.Now()
		}
		if !b.Fenced {
			live = append(live, b)
		}
	}
	for id := range t.lastContact {
		if _, ok := reg[id]; !ok {
			delete(t.lastContact, id)
		}
	}
	t.registered = reg
	return live
}

// heartbeatAction is what a heartbeat does to a registered broker.
type heartbeatAction int

const (
	hbStay               heartbeatAction = iota // no change
	hbUnfence                                   // fenced -> unfenced
	hbFence                                     // unfenced -> fenced, asked by the broker
	hbControlledShutdown                        // move its leaderships; shut down once it leads none
	hbShutdownNow                               // a fenced broker may stop at once
)

func (a heartbeatAction) String() string {
	return [...]string{"stay", "unfence", "fence", "controlled-shutdown", "shutdown-now"}[a]
}

// decideHeartbeat is BrokerHeartbeatManager.calculateNextBrokerState's
// transitions: a fenced broker that wants to shut down may at once; one
// that does not want to stay fenced is unfenced (Kafka also waits until it
// has replayed the metadata log to its registration; here the metadata is
// pushed to it as it becomes live); an unfenced broker that asks to be
// fenced is; one that wants to shut down enters a controlled shutdown.
func decideHeartbeat(fenced, wantFence, wantShutdown bool) heartbeatAction {
	switch {
	case fenced && wantShutdown:
		return hbShutdownNow
	case fenced && !wantFence:
		return hbUnfence
	case fenced:
		return hbStay
	case wantFence:
		return hbFence
	case wantShutdown:
		return hbControlledShutdown
	}
	return hbStay
}

// staleBrokers are the unfenced brokers whose last heartbeat is older than
// the session timeout, by id (BrokerHeartbeatManager.findOneStaleBroker).
func staleBrokers(registered map[int32]coord.BrokerInfo, lastContact map[int32]time.Time, now time.Time, timeout time.Duration) []int32 {
	var stale []int32
	for id, b := range registered {
		if !b.Fenced && now.Sub(lastContact[id]) > timeout {
			stale = append(stale, id)
		}
	}
	slices.Sort(stale)
	return stale
}

// fenceExpired fences every unfenced broker whose heartbeats stopped.
func (t *term) fenceExpired(ctx context.Context) error {
	now := t.c.cfg.Now()
	for _, id := range staleBrokers(t.registered, t.lastContact, now, t.c.cfg.BrokerSessionTimeout) {
		t.log.Info("fencing broker: no heartbeat within broker.session.timeout.ms", "broker", id,
			"last_heartbeat_ago", now.Sub(t.lastContact[id]).Round(1e6), "session_timeout", t.c.cfg.BrokerSessionTimeout)
		if err := t.setFenced(ctx, id, true); err != nil {
			return err
		}
	}
	return nil
}

// setFenced writes broker id's fenced state and applies it at once, so
// the decisions that follow see it before the watch brings it back.
func (t *term) setFenced(ctx context.Context, id int32, fenced bool) error {
	b := t.registered[id]
	rev, err := t.c.cfg.Coord.SetBrokerFenced(ctx, t.l, id, b.Epoch, fenced)
	if err != nil {
		if errors.Is(err, coord.ErrStaleBrokerEpoch) {
			return nil // re-registered or gone meanwhile: the watch tells
		}
		return err
	}
	t.brokersRev = max(t.brokersRev, rev)
	b.Fenced = fenced
	bs := make([]coord.BrokerInfo, 0, len(t.registered))
	for rid, rb := range t.registered {
		if rid == id {
			rb = b
		}
		bs = append(bs, rb)
	}
	slices.SortFunc(bs, func(a, b coord.BrokerInfo) int { return int(a.ID - b.ID) })
	return t.onBrokers(ctx, t.liveOf(bs))
}

// BrokerRegistration registers a KRaft broker, fenced, and answers its
// broker epoch (ClusterControlManager.registerBroker). A broker that says
// it did not shut down cleanly (PreviousBrokerEpoch -1) leaves every ELR
// when it becomes live.
func (c *Controller) BrokerRegistration(ctx context.Context, req *kmsg.BrokerRegistrationRequest) *kmsg.BrokerRegistrationResponse {
	resp := req.ResponseKind().(*kmsg.BrokerRegistrationResponse)
	resp.SetVersion(req.GetVersion())
	resp.BrokerEpoch = -1
	if !c.cfg.KRaft {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return resp
	}
	if len(req.Listeners) == 0 {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp
	}
	// The first listener is the one the controller dials (the broker's
	// inter-broker listener).
	info := coord.BrokerInfo{
		ID: req.BrokerID, Host: req.Listeners[0].Host, Port: int32(req.Listeners[0].Port), Rack: deref(req.Rack),
		IncarnationID: hex.EncodeToString(req.IncarnationID[:]), UncleanShutdown: req.PreviousBrokerEpoch == -1,
		Timestamp: c.cfg.Now().UnixMilli(),
	}
	for _, l := range req.Listeners {
		info.Endpoints = append(info.Endpoints, l.Name+"://"+net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port))))
	}
	ok := c.submit(ctx, func(ctx context.Context, t *term) error {
		epoch, rev, err := c.cfg.Coord.RegisterBrokerKRaft(ctx, t.l, info)
		if err != nil {
			resp.ErrorCode = errCode(err)
			return err
		}
		t.brokersRev = max(t.brokersRev, rev)
		if old, ok := t.registered[info.ID]; !ok || old.Epoch != epoch {
			t.log.Info("registered broker", "broker", info.ID, "broker_epoch", epoch, "incarnation", info.IncarnationID, "unclean_shutdown", info.UncleanShutdown)
		}
		resp.BrokerEpoch = epoch
		t.lastContact[info.ID] = c.cfg.Now()
		// Known at once: the broker's first heartbeat may come before
		// the watch brings the registration back.
		if old, ok := t.registered[info.ID]; ok && old.Epoch == epoch {
			info.Fenced = old.Fenced
		} else {
			info.Fenced = true
		}
		info.Epoch = epoch
		t.registered[info.ID] = info
		return nil
	})
	if !ok {
		resp.ErrorCode = kerr.NotController.Code
	}
	return resp
}

// BrokerHeartbeat records a KRaft broker's heartbeat and moves it through
// BrokerHeartbeatManager's states: fenced → unfenced when it does not
// want to stay fenced; unfenced → controlled shutdown when it wants to
// shut down and still leads partitions; → shut down (fenced) once it
// leads none.
func (c *Controller) BrokerHeartbeat(ctx context.Context, req *kmsg.BrokerHeartbeatRequest) *kmsg.BrokerHeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
	resp.SetVersion(req.GetVersion())
	resp.IsFenced = true
	if !c.cfg.KRaft {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return resp
	}
	ok := c.submit(ctx, func(ctx context.Context, t *term) error {
		id := req.BrokerID
		b, ok := t.registered[id]
		switch {
		case !ok:
			resp.ErrorCode = kerr.BrokerIDNotRegistered.Code
			return nil
		case b.Epoch != req.BrokerEpoch:
			resp.ErrorCode = kerr.StaleBrokerEpoch.Code
			return nil
		}
		t.lastContact[id] = c.cfg.Now()
		resp.IsCaughtUp = true
		var err error
		switch decideHeartbeat(b.Fenced, req.WantFence, req.WantShutdown) {
		case hbShutdownNow:
			resp.ShouldShutdown = true
		case hbUnfence:
			t.log.Info("unfencing broker", "broker", id, "broker_epoch", b.Epoch)
			err = t.setFenced(ctx, id, false)
		case hbFence:
			err = t.setFenced(ctx, id, true)
		case hbControlledShutdown:
			var remaining []coord.TopicPartition
			remaining, err = t.controlledShutdown(ctx, id)
			if err == nil && len(remaining) == 0 {
				t.log.Info("broker shut down under control; fencing it", "broker", id)
				resp.ShouldShutdown = true
				err = t.setFenced(ctx, id, true)
			}
		}
		resp.IsFenced = t.registered[id].Fenced
		if err != nil {
			resp.ErrorCode = errCode(err)
		}
		return err
	})
	if !ok {
		resp.ErrorCode = kerr.NotController.Code
	}
	return resp
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
