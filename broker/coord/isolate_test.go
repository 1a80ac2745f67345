package coord

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// peerProxy forwards TCP to a member's peer port. etcd's peer requests
// name their sender (the X-Server-From header), so the proxy can drop the
// traffic of one member: cutting that member's own proxy and its requests
// through every other proxy isolates it both ways, while the others still
// talk to each other.
type peerProxy struct {
	l       net.Listener
	target  string
	mu      sync.Mutex
	blocked func(from string) bool // nil: forward all
	conns   map[net.Conn]string    // accepted connection -> sender
	ups     map[net.Conn]net.Conn
	wg      sync.WaitGroup
}

func newPeerProxy(t *testing.T, listen, target string) *peerProxy {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	p := &peerProxy{l: l, target: target, conns: map[net.Conn]string{}, ups: map[net.Conn]net.Conn{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.block(func(string) bool { return true })
		p.wg.Wait()
	})
	return p
}

func (p *peerProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// handle reads the first request's header to learn the sender, then pipes.
func (p *peerProxy) handle(c net.Conn) {
	defer p.wg.Done()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	var head bytes.Buffer
	from := ""
	for {
		line, err := br.ReadString('\n')
		head.WriteString(line)
		if err != nil {
			c.Close()
			return
		}
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && strings.EqualFold(k, "X-Server-From") {
			from = strings.TrimSpace(v)
		}
		if line == "\r\n" {
			break
		}
	}
	c.SetReadDeadline(time.Time{})
	p.mu.Lock()
	if p.blocked != nil && p.blocked(from) {
		p.mu.Unlock()
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c], p.ups[c] = from, up
	p.mu.Unlock()
	up.Write(head.Bytes())
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		io.Copy(c, up)
		c.Close()
	}()
	io.Copy(up, br)
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.ups, c)
	p.mu.Unlock()
}

// block drops current and future connections whose sender matches (nil:
// none).
func (p *peerProxy) block(blocked func(from string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = blocked
	if blocked == nil {
		return
	}
	for c, from := range p.conns {
		if blocked(from) {
			c.Close()
			p.ups[c].Close()
		}
	}
}

// TestIsolatedMember cuts one member of three off from its peers. The other
// two keep a quorum; the cut-off member loses its leader and refuses
// requests. A client that knows all three members must not notice: every
// write succeeds (refused ones are retried on another member).
func TestIsolatedMember(t *testing.T) {
	urls := freeURLs(t, 9) // per member: client, peer (real), peer (proxy)
	var initial []string
	var cfgs []ServerConfig
	var proxies []*peerProxy
	for i := range 3 {
		name := fmt.Sprintf("c%d", i+1)
		client, peer, proxy := urls[3*i], urls[3*i+1], urls[3*i+2]
		cfgs = append(cfgs, ServerConfig{
			Name: name, DataDir: t.TempDir(), UnsafeNoFsync: true, ReadyTimeout: 30 * time.Second,
			ListenClientURLs: client, ListenPeerURLs: peer, AdvertisePeerURLs: proxy,
		})
		proxies = append(proxies, newPeerProxy(t, strings.TrimPrefix(proxy, "http://"), strings.TrimPrefix(peer, "http://")))
		initial = append(initial, name+"="+proxy)
	}
	tc := &testCluster{t: t, servers: make([]*Server, 3)}
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(initial, ",")
	}
	tc.cfgs = cfgs
	t.Cleanup(tc.close)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() { errs <- tc.start(i) }()
	}
	for range 3 {
		if err := recv(t, errs, 40*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// Sessions made before the cut, on clients of their own: with ten, some
	// keepalive streams almost surely use the member about to be cut off.
	type session struct {
		c *Client
		r *Registration
	}
	var sessions []session
	for i := range int32(10) {
		sc := tc.dial(t)
		r, err := sc.RegisterBroker(context.Background(), BrokerInfo{ID: 100 + i, Host: "h", Port: 1}, sessionTTL)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, session{sc, r})
	}

	// Cut off a follower both ways, and wait until it knows it has no leader.
	victim := (waitLeaderIndex(t, tc) + 1) % 3
	cut := time.Now()
	tc.mu.Lock()
	victimID := tc.servers[victim].etcd.Server.MemberID().String()
	tc.mu.Unlock()
	for i, p := range proxies {
		if i == victim {
			p.block(func(string) bool { return true })
		} else {
			p.block(func(from string) bool { return from == victimID })
		}
	}
	direct, err := clientv3.New(clientv3.Config{Endpoints: []string{cfgs[victim].ListenClientURLs}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	proctest.Eventually(t, 20*time.Second, "condition", func() error {
		ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(context.Background()), time.Second)
		defer cancel()
		_, err := direct.Put(ctx, "/probe", "x")
		if errors.Is(err, rpctypes.ErrNoLeader) {
			return nil
		}
		return fmt.Errorf("isolated member answered a write with %v, want no leader", err)
	})

	c := tc.dial(t, WithCallTimeout(3*time.Second))
	ctx := context.Background()
	l, err := c.Campaign(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Watches keep delivering: a registration made now shows up.
	watch := c.WatchBrokers(ctx)
	if _, err := c.RegisterBroker(ctx, BrokerInfo{ID: 5, Host: "h", Port: 1}, 0); err != nil {
		t.Fatal(err)
	}
	for ev := recv(t, watch, 10*time.Second); !hasBroker(ev, 5); {
		ev = recv(t, watch, 10*time.Second)
	}
	if err := c.CreateTopic(ctx, l, TopicSpec{Name: "t", Assignment: map[int32][]int32{0: {1}}}, map[int32]PartitionState{0: {Leader: 1, ISR: []int32{1}}}); err != nil {
		t.Fatal(err)
	}
	st, err := c.PartitionState(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		st.LeaderEpoch++
		vs, err := c.SetPartitionStates(ctx, l, []PartitionStateUpdate{{Topic: "t", Partition: 0, State: st, ExpectedVersion: st.Version}})
		if err != nil {
			t.Fatalf("write %d with a member cut off: %v", i, err)
		}
		st.Version = vs[0]
	}

	select {
	case <-l.Done():
		t.Fatal("leadership lost while a quorum was reachable")
	default:
	}

	// No session may be lost, however long the member stays cut off: wait
	// out two session timeouts, then check every registration.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(cut) < 2*sessionTTL {
		for _, s := range sessions {
			select {
			case <-s.r.Done():
				t.Fatalf("broker %d lost its %v session %v after the cut", s.r.Info().ID, sessionTTL, time.Since(cut))
			default:
			}
		}
		<-tick.C
	}
	for _, s := range sessions {
		info, ok, err := c.Broker(ctx, s.r.Info().ID)
		if err != nil || !ok || info.Epoch != s.r.Epoch() {
			t.Fatalf("broker %d after the cut: %+v ok=%v err=%v", s.r.Info().ID, info, ok, err)
		}
	}

	// Healing brings the member back: it answers writes again.
	for _, p := range proxies {
		p.block(nil)
	}
	proctest.Eventually(t, 20*time.Second, "condition", func() error {
		ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(context.Background()), time.Second)
		defer cancel()
		_, err := direct.Put(ctx, "/probe", "x")
		return err
	})
}

// sessionTTL is short next to etcd's 7 s forwarding timeout for a renewal
// sent to a member without a leader: sessions survive only if the client
// moves its keepalives to another member well before that.
const sessionTTL = 3 * time.Second

func waitLeaderIndex(t *testing.T, tc *testCluster) int {
	t.Helper()
	var idx int
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		if idx = tc.leader(); idx < 0 {
			return errors.New("no leader")
		}
		return nil
	})
	return idx
}

func hasBroker(ev BrokersEvent, id int32) bool {
	for _, b := range ev.Brokers {
		if b.ID == id {
			return true
		}
	}
	return false
}
