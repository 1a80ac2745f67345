package controller

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/coord/coordtest"
	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// controlTable is what the fake brokers serve: the controller's requests.
var controlTable = wire.Table{
	4: {Min: leaderAndISRVersion, Max: leaderAndISRVersion},
	5: {Min: stopReplicaVersion, Max: stopReplicaVersion},
	6: {Min: updateMetadataVersion, Max: updateMetadataVersion},
}

// received is one request a fake broker got.
type received struct {
	req kmsg.Request
	at  time.Time
}

// fakeBroker is a TCP server that records the controller's requests and
// answers each with an empty successful response.
type fakeBroker struct {
	id int32
	// drop > 0 closes the connection instead of answering, that many
	// times; hang makes it record requests and never answer.
	drop atomic.Int32
	hang atomic.Bool
	ln   net.Listener
	mu   sync.Mutex
	got  []received
	wg   sync.WaitGroup
}

func startFakeBroker(t testing.TB, id int32) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBroker{id: id, ln: ln}
	var conns sync.Map
	fb.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			fb.wg.Go(func() {
				defer conns.Delete(c)
				fb.serve(t, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		fb.wg.Wait()
	})
	return fb
}

func (fb *fakeBroker) serve(t testing.TB, c net.Conn) {
	defer c.Close()
	rd := bufio.NewReader(c)
	for {
		frame, err := wire.ReadFrame(rd, 64<<20, nil)
		if err != nil {
			return
		}
		h, req, err := controlTable.Decode(frame)
		if err != nil {
			t.Errorf("broker %d: decode: %v", fb.id, err)
			return
		}
		fb.mu.Lock()
		fb.got = append(fb.got, received{req: req, at: time.Now()})
		fb.mu.Unlock()
		if fb.hang.Load() {
			continue
		}
		if fb.drop.Add(-1) >= 0 {
			return
		}
		resp := req.ResponseKind()
		resp.SetVersion(h.Version)
		if _, err := c.Write(wire.AppendResponse(nil, h, resp)); err != nil {
			return
		}
	}
}

func (fb *fakeBroker) info() coord.BrokerInfo {
	a := fb.ln.Addr().(*net.TCPAddr)
	return coord.BrokerInfo{ID: fb.id, Host: "127.0.0.1", Port: int32(a.Port)}
}

func (fb *fakeBroker) requests() []received {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return slices.Clone(fb.got)
}

// lastLAI is the newest LeaderAndIsr state of tp this broker received.
func (fb *fakeBroker) lastLAI(tp coord.TopicPartition) (kmsg.LeaderAndISRRequestTopicPartition, *kmsg.LeaderAndISRRequest, bool) {
	var out kmsg.LeaderAndISRRequestTopicPartition
	var outReq *kmsg.LeaderAndISRRequest
	found := false
	for _, r := range fb.requests() {
		lai, ok := r.req.(*kmsg.LeaderAndISRRequest)
		if !ok {
			continue
		}
		for _, ts := range lai.TopicStates {
			for _, ps := range ts.PartitionStates {
				if ts.Topic == tp.Topic && ps.Partition == tp.Partition {
					out, outReq, found = ps, lai, true
				}
			}
		}
	}
	return out, outReq, found
}

// lastUM is the newest UpdateMetadata state of tp this broker received.
func (fb *fakeBroker) lastUM(tp coord.TopicPartition) (kmsg.UpdateMetadataRequestTopicPartition, *kmsg.UpdateMetadataRequest, bool) {
	var out kmsg.UpdateMetadataRequestTopicPartition
	var outReq *kmsg.UpdateMetadataRequest
	found := false
	for _, r := range fb.requests() {
		um, ok := r.req.(*kmsg.UpdateMetadataRequest)
		if !ok {
			continue
		}
		for _, ts := range um.TopicStates {
			for _, ps := range ts.PartitionStates {
				if ts.Topic == tp.Topic && ps.Partition == tp.Partition {
					out, outReq, found = ps, um, true
				}
			}
		}
	}
	return out, outReq, found
}

// env is a coordinator, fake brokers registered in it and an admin client.
type env struct {
	t       testing.TB
	cfg     coord.ServerConfig
	srv     *coord.Server
	admin   *coord.Client
	brokers map[int32]*fakeBroker
	regs    map[int32]*coord.Registration
}

func newEnv(t testing.TB, ids ...int32) *env {
	t.Helper()
	cfg := coordtest.NewConfig(t)
	srv := coordtest.StartWith(t, cfg)
	e := &env{t: t, cfg: cfg, srv: srv, admin: coordtest.Dial(t, srv), brokers: map[int32]*fakeBroker{}, regs: map[int32]*coord.Registration{}}
	for _, id := range ids {
		e.brokers[id] = startFakeBroker(t, id)
		e.start(id)
	}
	return e
}

// start registers broker id (again, with a new epoch, after kill).
func (e *env) start(id int32) {
	e.t.Helper()
	r, err := e.admin.RegisterBroker(context.Background(), e.brokers[id].info(), 0)
	if err != nil {
		e.t.Fatalf("register broker %d: %v", id, err)
	}
	e.regs[id] = r
	e.t.Cleanup(func() { r.Close() })
}

// kill ends broker id's session at once, as an expired lease would.
func (e *env) kill(id int32) {
	e.t.Helper()
	if err := e.regs[id].Close(); err != nil {
		e.t.Fatalf("kill broker %d: %v", id, err)
	}
}

// running is a controller running a term in the background.
type running struct {
	ctrl *Controller
	l    *coord.Leadership
	done chan struct{} // closed when Run returned, with err set
	err  error
}

// startController elects a controller on its own client and session (id
// is not one of the fake brokers, so killing them does not depose it) and
// runs it until the test ends.
func (e *env) startController(id int32, mutate func(*Config), opts ...coord.Option) *running {
	e.t.Helper()
	cl := coordtest.Dial(e.t, e.srv, opts...)
	bc := kafkaconfig.NewBroker()
	if err := bc.Set("auto.leader.rebalance.enable", "false"); err != nil {
		e.t.Fatal(err)
	}
	cfg := Config{BrokerID: id, Coord: cl, Broker: bc, Logger: slog.New(slog.NewTextHandler(e.t.Output(), nil)), ISRChangeCheckInterval: 100 * time.Millisecond, RequestTimeout: 2 * time.Second, RetryBackoff: 20 * time.Millisecond}
	if mutate != nil {
		mutate(&cfg)
	}
	ctrl := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := cl.Campaign(ctx, id)
	if err != nil {
		cancel()
		e.t.Fatalf("campaign: %v", err)
	}
	r := &running{ctrl: ctrl, l: l, done: make(chan struct{})}
	go func() {
		r.err = ctrl.Run(ctx, l)
		close(r.done)
	}()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			e.t.Errorf("controller %d did not stop", id)
		}
	})
	proctest.Eventually(e.t, 10*time.Second, "condition", func() error {
		if !ctrl.Active() {
			return errors.New("controller not active")
		}
		return nil
	})
	return r
}

func (e *env) createTopic(name string, assignment map[int32][]int32, configs map[string]string) {
	e.t.Helper()
	if err := e.admin.CreateTopic(context.Background(), nil, coord.TopicSpec{Name: name, Assignment: assignment, Configs: configs}, nil); err != nil {
		e.t.Fatalf("create topic %s: %v", name, err)
	}
}

// waitState waits until tp's state on the coordinator has leader, ISR and
// leader epoch as given, and returns it.
func (e *env) waitState(tp coord.TopicPartition, leader int32, isr []int32, epoch int32) coord.PartitionState {
	e.t.Helper()
	var st coord.PartitionState
	proctest.Eventually(e.t, 10*time.Second, "condition", func() error {
		var err error
		st, err = e.admin.PartitionState(context.Background(), tp.Topic, tp.Partition)
		if err != nil {
			return err
		}
		if st.Leader != leader || !slices.Equal(st.ISR, isr) || st.LeaderEpoch != epoch {
			return fmt.Errorf("%s-%d: leader %d isr %v epoch %d, want leader %d isr %v epoch %d",
				tp.Topic, tp.Partition, st.Leader, st.ISR, st.LeaderEpoch, leader, isr, epoch)
		}
		return nil
	})
	return st
}

// waitLAI waits until broker id received a LeaderAndIsr for tp with the
// given leader, ISR and epoch.
func (e *env) waitLAI(id int32, tp coord.TopicPartition, leader int32, isr []int32, epoch int32) kmsg.LeaderAndISRRequestTopicPartition {
	e.t.Helper()
	ps, _ := e.waitLAIReq(id, tp, leader, isr, epoch)
	return ps
}

// waitLAIReq is waitLAI returning the request too.
func (e *env) waitLAIReq(id int32, tp coord.TopicPartition, leader int32, isr []int32, epoch int32) (kmsg.LeaderAndISRRequestTopicPartition, *kmsg.LeaderAndISRRequest) {
	e.t.Helper()
	var ps kmsg.LeaderAndISRRequestTopicPartition
	var req *kmsg.LeaderAndISRRequest
	proctest.Eventually(e.t, 10*time.Second, "condition", func() error {
		var ok bool
		ps, req, ok = e.brokers[id].lastLAI(tp)
		if !ok {
			return fmt.Errorf("broker %d: no LeaderAndIsr for %v", id, tp)
		}
		if ps.Leader != leader || !slices.Equal(ps.ISR, isr) || ps.LeaderEpoch != epoch {
			return fmt.Errorf("broker %d: LeaderAndIsr %v leader %d isr %v epoch %d, want %d %v %d", id, tp, ps.Leader, ps.ISR, ps.LeaderEpoch, leader, isr, epoch)
		}
		return nil
	})
	return ps, req
}

// waitUMISR waits until broker id received an UpdateMetadata for tp with
// the given ISR, whoever leads.
func (e *env) waitUMISR(id int32, tp coord.TopicPartition, isr []int32) {
	e.t.Helper()
	proctest.Eventually(e.t, 10*time.Second, "condition", func() error {
		ps, _, ok := e.brokers[id].lastUM(tp)
		if !ok || !slices.Equal(ps.ISR, isr) {
			return fmt.Errorf("broker %d: UpdateMetadata %v isr %v, want %v", id, tp, ps.ISR, isr)
		}
		return nil
	})
}

// waitUM waits until broker id received an UpdateMetadata for tp with the
// given leader and ISR.
func (e *env) waitUM(id int32, tp coord.TopicPartition, leader int32, isr []int32) {
	e.t.Helper()
	proctest.Eventually(e.t, 10*time.Second, "condition", func() error {
		ps, _, ok := e.brokers[id].lastUM(tp)
		if !ok {
			return fmt.Errorf("broker %d: no UpdateMetadata for %v", id, tp)
		}
		if ps.Leader != leader || !reflect.DeepEqual(ps.ISR, isr) {
			return fmt.Errorf("broker %d: UpdateMetadata %v leader %d isr %v, want %d %v", id, tp, ps.Leader, ps.ISR, leader, isr)
		}
		return nil
	})
}

func tp(topic string, p int32) coord.TopicPartition {
	return coord.TopicPartition{Topic: topic, Partition: p}
}

func ids(v ...int32) []int32 { return v }

// metricValue reads a gauge or counter.
func metricValue(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return -1
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}
