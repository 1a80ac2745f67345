package nemesis

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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
	}
	return v, nil
}

func (r *LiveResolver) kafka(ctx context.Context, bs []*compose.Node, topics []string, v *View) error {
	seeds := make([]string, len(bs))
	for i, b := range bs {
		seeds[i] = net.JoinHostPort(b.Addr.String(), strconv.Itoa(compose.BrokerPort))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.Dialer(r.Cluster.Dial()),
		kgo.RequestRetries(2), kgo.RetryTimeout(3*time.Second))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).Metadata(ctx, topics...)
	if err != nil {
		return fmt.Errorf("kafka metadata: %w", err)
	}
	v.Controller = md.Controller
	for _, t := range md.Topics {
		for _, p := range t.Partitions {
			v.Partitions[t.Topic+"/"+strconv.Itoa(int(p.Partition))] = PartitionView{
				Leader: p.Leader, Replicas: p.Replicas, ISR: p.ISR}
		}
	}
	return nil
}

// coordinatorLeader asks each member for its status and returns the name
// of the member whose id is the reported leader; "" if none answers.
func (r *LiveResolver) coordinatorLeader(ctx context.Context, cs []*compose.Node) string {
	dial := r.Cluster.Dial()
	type member struct {
		name string
		id   uint64
	}
	var members []member
	var leader uint64
	for _, c := range cs {
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
