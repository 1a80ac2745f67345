package nemesis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/isrlab/isrlab/compose"
)

// LiveResolver reads leaders, ISRs and the controller through Kafka
// Metadata and the coordinator leader through etcd Status, dialling from
// the cluster's client namespace.
type LiveResolver struct {
	Cluster *compose.Cluster
	// Timeout bounds one View; default 5 s.
	Timeout time.Duration
}

// View implements Resolver.
func (r *LiveResolver) View(ctx context.Context, topics []string) (View, error) {
	d := r.Timeout
	if d <= 0 {
		d = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	v := View{Controller: -1, Partitions: map[string]PartitionView{}}
	if bs := r.Cluster.Of(compose.RoleBroker); len(bs) > 0 {
		if err := r.kafka(ctx, bs, topics, &v); err != nil {
			return View{}, err
		}
	}
	if cs := r.Cluster.Of(compose.RoleCoordinator); len(cs) > 0 {
		v.CoordinatorLeader = r.coordinatorLeader(ctx, cs)
		if r.Cluster.KRaft {
			v.Controller = r.kraftController(ctx, cs)
		}
	}
	return v, nil
}

// Partitions is View without the coordinator leader: the topics'
// partitions and the controller, from the brokers' metadata alone.
func (r *LiveResolver) Partitions(ctx context.Context, topics []string) (View, error) {
	d := r.Timeout
	if d <= 0 {
		d = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	v := View{Controller: -1, Partitions: map[string]PartitionView{}}
	if err := r.kafka(ctx, r.Cluster.Of(compose.RoleBroker), topics, &v); err != nil {
		return View{}, err
	}
	if r.Cluster.KRaft {
		v.Controller = -1 // the brokers name themselves; the controller is on the quorum (View)
	}
	return v, nil
}

// kafka asks every broker for metadata at once, so that a partitioned or
// paused broker cannot stall a resolution: it merges the answers that
// arrive until 500 ms after the first (mergeMetadata).
func (r *LiveResolver) kafka(ctx context.Context, bs []*compose.Node, topics []string, v *View) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		md  brokerMetadata
		err error
	}
	answers := make(chan answer, len(bs))
	for _, b := range bs {
		go func() {
			md, err := r.metadata(ctx, b.KafkaAddr(), topics)
			answers <- answer{brokerMetadata{int32(b.ID), md}, err}
		}()
	}
	var errs []error
	var got []brokerMetadata
	var grace <-chan time.Time
collect:
	for range bs {
		select {
		case a := <-answers:
			if a.err != nil {
				errs = append(errs, a.err)
				continue
			}
			got = append(got, a.md)
			if grace == nil {
				grace = time.After(500 * time.Millisecond)
			}
		case <-grace:
			break collect
		}
	}
	if len(got) == 0 {
		return fmt.Errorf("kafka metadata: no broker answered: %w", errors.Join(errs...))
	}
	mergeMetadata(got, v)
	return nil
}

// brokerMetadata is one broker's Metadata answer.
type brokerMetadata struct {
	broker int32
	md     *kmsg.MetadataResponse
}

// mergeMetadata fills v from brokers' answers, whose caches can lag behind
// the controller: the controller is the one most answers name, and each
// partition comes from the answer with the highest leader epoch, the
// controller's own on a tie. An ISR change keeps the leader epoch, and a
// broker the controller cannot reach (a follower cut from a leader that is
// the controller) keeps the ISR it had; the controller's own cache has
// every change it sent.
func mergeMetadata(got []brokerMetadata, v *View) {
	votes := map[int32]int{}
	for _, a := range got {
		votes[a.md.ControllerID]++
		if votes[a.md.ControllerID] > votes[v.Controller] || v.Controller < 0 {
			v.Controller = a.md.ControllerID
		}
	}
	ordered := make([]brokerMetadata, 0, len(got))
	for _, a := range got {
		if a.broker == v.Controller {
			ordered = append(ordered, a)
		}
	}
	for _, a := range got {
		if a.broker != v.Controller {
			ordered = append(ordered, a)
		}
	}
	epochs := map[string]int32{}
	for _, a := range ordered {
		for _, t := range a.md.Topics {
			if t.Topic == nil || t.ErrorCode != 0 {
				continue
			}
			for _, p := range t.Partitions {
				key := *t.Topic + "/" + strconv.Itoa(int(p.Partition))
				if e, ok := epochs[key]; ok && e >= p.LeaderEpoch {
					continue
				}
				epochs[key] = p.LeaderEpoch
				v.Partitions[key] = PartitionView{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, Replicas: p.Replicas, ISR: p.ISR}
			}
		}
	}
}

// metadata asks the broker at addr, and only it.
func (r *LiveResolver) metadata(ctx context.Context, addr string, topics []string) (*kmsg.MetadataResponse, error) {
	kafka, err := r.Cluster.KafkaOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.DialTimeout(2 * time.Second)}, kafka...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return nil, fmt.Errorf("metadata from %s: no seed broker", addr)
	}
	resp, err := seeds[0].RetriableRequest(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("metadata from %s: %w", addr, err)
	}
	return resp.(*kmsg.MetadataResponse), nil
}

// etcdClient dials one coordinator member from the client namespace.
func (r *LiveResolver) etcdClient(c *compose.Node) (*clientv3.Client, string, error) {
	dial := r.Cluster.Dial()
	ep := net.JoinHostPort(c.Addr.String(), strconv.Itoa(compose.CoordinatorClientPort))
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{ep},
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			if _, rest, ok := strings.Cut(addr, "://"); ok {
				addr = rest
			}
			return dial(ctx, "tcp", addr)
		})},
	})
	return cli, ep, err
}

// kraftController reads the active KRaft controller's node id from the
// coordinators' controller election (its oldest candidate key, whose
// value is the id); -1 if no member answers or nobody is elected.
func (r *LiveResolver) kraftController(ctx context.Context, cs []*compose.Node) int32 {
	for _, c := range cs {
		cli, _, err := r.etcdClient(c)
		if err != nil {
			continue
		}
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cli.Get(gctx, "/isrlab/controller/", append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...) // coord.DefaultChroot + the election prefix
		cancel()
		cli.Close()
		if err != nil {
			continue
		}
		if len(resp.Kvs) == 0 {
			return -1
		}
		id, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 32)
		if err != nil {
			return -1
		}
		return int32(id)
	}
	return -1
}

// coordinatorLeader asks each member for its status and returns the name
// of the member whose id is the reported leader; "" if none answers.
func (r *LiveResolver) coordinatorLeader(ctx context.Context, cs []*compose.Node) string {
	type member struct {
		name string
		id   uint64
	}
	var members []member
	var leader uint64
	for _, c := range cs {
		cli, ep, err := r.etcdClient(c)
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		cli.Close()
		if err != nil {
			continue
		}
		members = append(members, member{c.Name, st.Header.MemberId})
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	for _, m := range members {
		if m.id == leader {
			return m.name
		}
	}
	return ""
}
