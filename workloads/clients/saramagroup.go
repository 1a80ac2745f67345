package clients

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// GroupConsumer opens a member of m.Group on sarama: a sarama.Client of
// the process's own (its connections watched by a commitWatch) and a
// ConsumerGroup made from it, consuming the topic in a goroutine of its
// own session after session. With m.AutoCommit sarama's offset manager
// commits every m.AutoCommitInterval (Consumer.Offsets.AutoCommit), on a
// revoke and when the group closes, what was marked: the driver marks
// each record as it hands it to a poll (MarkMessage), so what was
// delivered is committed, processed or not. Without it the driver marks
// and commits in Commit (MarkOffset, then Commit).
//
// sarama returns no commit's outcome (Commit returns nothing, its errors
// go to a channel shared with the consumers' and carry no request), so
// the outcome is read on the wire: the OffsetCommit request the client
// writes and the coordinator's answer to it (commitWatch).
func (s *saramaClient) GroupConsumer(ctx context.Context, _ int, m workloads.GroupMember) (workloads.GroupConsumer, error) {
	g := &saramaGroup{topic: s.cfg.Topic, member: m, done: make(chan struct{})}
	g.watch = &commitWatch{dial: s.dial, report: g.report}
	conf := s.config(g.watch.Dial)
	// A poll takes what sarama has fetched and handed out, as a poll of
	// kgo's takes what kgo has buffered: up to a channel's worth.
	g.merged = newMergedBuffer(saramaPollError, conf.ChannelBufferSize)
	conf.Consumer.Offsets.AutoCommit.Enable = m.AutoCommit
	if m.AutoCommitInterval > 0 {
		conf.Consumer.Offsets.AutoCommit.Interval = m.AutoCommitInterval
	}
	if err := retry(ctx, func() (err error) {
		g.cl, err = sarama.NewClient(s.seeds, conf)
		return err
	}); err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	grp, err := sarama.NewConsumerGroupFromClient(m.Group, g.cl)
	if err != nil {
		g.cl.Close()
		return nil, fmt.Errorf("new consumer group: %w", err)
	}
	g.grp = grp
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g.cancel = cancel
	go g.consume(cctx)
	go func() {
		for err := range grp.Errors() {
			g.fail(err)
		}
	}()
	return g, nil
}

// saramaGroup is a sarama consumer group member.
type saramaGroup struct {
	*merged
	topic  string
	member workloads.GroupMember
	watch  *commitWatch
	cl     sarama.Client
	grp    sarama.ConsumerGroup
	cancel context.CancelFunc
	done   chan struct{} // consume returned

	mu   sync.Mutex
	sess sarama.ConsumerGroupSession // the current session, nil between sessions
	// collect, during Commit, gathers the commits written; otherwise
	// they are the client's own (member.Committed).
	collect *[]workloads.Committed
	// commitMu makes Commit one at a time.
	commitMu sync.Mutex
	once     sync.Once
}

// consume runs sessions until the group is closed; an error of Consume
// (no coordinator, a join refused) goes to the next poll.
func (g *saramaGroup) consume(ctx context.Context) {
	defer close(g.done)
	for ctx.Err() == nil {
		err := g.grp.Consume(ctx, []string{g.topic}, g)
		if errors.Is(err, sarama.ErrClosedConsumerGroup) || ctx.Err() != nil {
			return
		}
		if err != nil {
			g.fail(err)
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// Setup is sarama's start of a session: the member's new assignment.
func (g *saramaGroup) Setup(sess sarama.ConsumerGroupSession) error {
	g.mu.Lock()
	g.sess = sess
	g.mu.Unlock()
	g.member.Assigned(slices.Clone(sess.Claims()[g.topic]))
	return nil
}

// Cleanup is sarama's end of a session, before its offsets are flushed
// (with auto-commit) and its partitions released: every partition is
// revoked (sarama's default, eager rebalancing).
func (g *saramaGroup) Cleanup(sarama.ConsumerGroupSession) error {
	g.mu.Lock()
	g.sess = nil
	g.mu.Unlock()
	g.member.Assigned([]int32{})
	return nil
}

// ConsumeClaim hands the claim's records to the polls until the session
// ends. A poll drops a record whose session has ended (its partition was
// revoked: kgo drops what it buffered of a revoked partition too) and,
// with auto-commit, marks each record it takes on its session, so that
// sarama's auto-commit covers what was delivered to the application.
func (g *saramaGroup) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	end := sess.Context().Done()
	for {
		select {
		case <-end:
			return nil
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			accept := func() bool {
				if sess.Context().Err() != nil {
					return false
				}
				if g.member.AutoCommit {
					sess.MarkMessage(m, "")
				}
				return true
			}
			select {
			case g.msgs <- fetched{partition: m.Partition, offset: m.Offset, value: m.Value, accept: accept}:
			case <-end:
				return nil
			}
		}
	}
}

// Commit marks offs on the current session and commits them
// synchronously (session.Commit, which writes one OffsetCommit request of
// every marked partition the member holds). Its outcome is the request's
// as the coordinator answered it; fail when no request was written (no
// session, none of offs' partitions held, no coordinator).
func (g *saramaGroup) Commit(_ context.Context, offs map[int32]int64) workloads.Committed {
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	g.mu.Lock()
	sess := g.sess
	var got []workloads.Committed
	if sess != nil {
		g.collect = &got
	}
	g.mu.Unlock()
	if sess == nil {
		return workloads.Committed{Type: history.Fail, Error: "not committed: the member is between sessions (rebalancing)"}
	}
	for p, o := range offs {
		sess.MarkOffset(g.topic, p, o, "")
	}
	sess.Commit()
	g.mu.Lock()
	g.collect = nil
	g.mu.Unlock()
	return mergeCommits(got)
}

// mergeCommits is the outcome of the requests one Commit wrote: one
// (sarama writes one per Commit), or none.
func mergeCommits(got []workloads.Committed) workloads.Committed {
	switch len(got) {
	case 0:
		return workloads.Committed{Type: history.Fail, Error: "not committed: sarama wrote no OffsetCommit request (no coordinator, or no partition of the commit held by the member)"}
	case 1:
		return got[0]
	}
	// Not seen: judged as the least certain of them, every offset named.
	out := got[0]
	for _, c := range got[1:] {
		out.Offsets = append(out.Offsets, c.Offsets...)
		if c.Type == history.Info || out.Type == history.Fail {
			out.Type = c.Type
		}
		out.Error = errors.Join(errors.New(out.Error), errors.New(c.Error)).Error()
	}
	return out
}

// report takes a commit read on the wire: Commit's while it waits, the
// client's own otherwise.
func (g *saramaGroup) report(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	c := workloads.CommitOutcome(g.topic, req, resp, err)
	g.mu.Lock()
	if g.collect != nil {
		*g.collect = append(*g.collect, c)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.member.Committed(c)
}

// Close closes the group as sarama's users do: the session ends (with
// auto-commit sarama's offset manager commits what was marked), the
// member leaves the group, and the client closes.
func (g *saramaGroup) Close() error {
	g.once.Do(func() {
		g.cancel()
		g.grp.Close()
		<-g.done
		g.cl.Close()
	})
	return nil
}

// Crash ends the member without a commit: the driver refuses every
// OffsetCommit request from here on (commitWatch.crash), so the final
// flush of sarama's offset manager (offsetManager.Close, called from the
// session's release when the group closes) writes nothing and the
// marked offsets stay uncommitted; the member still leaves the group, as
// kgo's Close does on franz-go's path.
func (g *saramaGroup) Crash() error {
	g.watch.crash()
	return g.Close()
}

// errCrashed is what a crashed member's connections answer.
var errCrashed = errors.New("the consumer crashed")

// The API keys a commitWatch follows.
const (
	offsetCommitKey = 8
	joinGroupKey    = 11
	syncGroupKey    = 14
)

// commitWatch dials a group member's connections and reads on them the
// OffsetCommit requests the client writes and the coordinator's answers,
// reporting each commit once it is answered (or its connection failed,
// info). After crash it writes no OffsetCommit request and reports
// nothing. With assigned set it also reports the member's assignments
// of topic: the one in each SyncGroup answer, and none (revoked) when
// the client writes a JoinGroup request after holding partitions (a
// client that does not say when its partitions change: kafka-go's
// Reader, whose rebalancing is eager).
type commitWatch struct {
	dial     workloads.DialFunc
	report   func(*kmsg.OffsetCommitRequest, *kmsg.OffsetCommitResponse, error)
	topic    string
	assigned func([]int32)

	mu      sync.Mutex
	crashed bool
	holds   bool // the last assignment reported was not empty
}

// assign reports parts as the member's assignment, [] only when it held
// partitions.
func (w *commitWatch) assign(parts []int32) {
	if w.assigned == nil {
		return
	}
	w.mu.Lock()
	skip := len(parts) == 0 && !w.holds
	w.holds = len(parts) > 0
	w.mu.Unlock()
	if !skip {
		w.assigned(parts)
	}
}

func (w *commitWatch) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := w.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, w: w, pending: map[int32]*kmsg.OffsetCommitRequest{}, syncs: map[int32]int16{}}, nil
}

func (w *commitWatch) crash() {
	w.mu.Lock()
	w.crashed = true
	w.mu.Unlock()
}

func (w *commitWatch) isCrashed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.crashed
}

// watchedConn is one connection of a commitWatch. sarama writes each
// request in one Write (Broker.sendInternal); responses are framed here
// from the bytes read (size, correlation id, body).
type watchedConn struct {
	net.Conn
	w *commitWatch

	mu      sync.Mutex
	pending map[int32]*kmsg.OffsetCommitRequest // by correlation id
	syncs   map[int32]int16                     // SyncGroup requests' versions, by correlation id, when assignments are watched
	// The response being read: its first 8 bytes (size, correlation
	// id), what is left of it, and its body when it answers a commit
	// (keep) or a SyncGroup (sync >= 0).
	hdr    [8]byte
	hdrN   int
	remain int
	keep   *kmsg.OffsetCommitRequest
	sync   int16
	body   []byte
}

func (c *watchedConn) Write(b []byte) (int, error) {
	if c.w.assigned != nil && len(b) >= 12 {
		switch int16(binary.BigEndian.Uint16(b[4:])) {
		case joinGroupKey:
			c.w.assign([]int32{})
		case syncGroupKey:
			c.mu.Lock()
			c.syncs[int32(binary.BigEndian.Uint32(b[8:]))] = int16(binary.BigEndian.Uint16(b[6:]))
			c.mu.Unlock()
		}
	}
	req, corr, ok := offsetCommitRequest(b)
	if ok {
		if c.w.isCrashed() {
			return 0, errCrashed
		}
		c.mu.Lock()
		c.pending[corr] = req
		c.mu.Unlock()
	}
	n, err := c.Conn.Write(b)
	if err != nil && ok {
		c.mu.Lock()
		delete(c.pending, corr)
		c.mu.Unlock()
		c.finish(req, nil, err) // maybe written: info
	}
	return n, err
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.scan(p[:n])
	if err != nil {
		c.failPending(err)
	}
	return n, err
}

func (c *watchedConn) Close() error {
	err := c.Conn.Close()
	c.failPending(errors.New("connection closed before the coordinator answered"))
	return err
}

// finish reports a commit unless the member crashed.
func (c *watchedConn) finish(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	if !c.w.isCrashed() {
		c.w.report(req, resp, err)
	}
}

// failPending reports every commit still unanswered on the connection as
// of unknown fate.
func (c *watchedConn) failPending(err error) {
	c.mu.Lock()
	var reqs []*kmsg.OffsetCommitRequest
	for corr, r := range c.pending {
		reqs = append(reqs, r)
		delete(c.pending, corr)
	}
	if c.keep != nil {
		reqs = append(reqs, c.keep)
		c.keep = nil
	}
	c.mu.Unlock()
	for _, r := range reqs {
		c.finish(r, nil, err)
	}
}

// scan follows the responses in the bytes read.
func (c *watchedConn) scan(b []byte) {
	for len(b) > 0 {
		c.mu.Lock()
		if c.hdrN < len(c.hdr) {
			k := copy(c.hdr[c.hdrN:], b)
			c.hdrN += k
			b = b[k:]
			if c.hdrN < len(c.hdr) {
				c.mu.Unlock()
				return
			}
			corr := int32(binary.BigEndian.Uint32(c.hdr[4:]))
			c.remain = int(int32(binary.BigEndian.Uint32(c.hdr[:4]))) - 4
			c.keep, c.body = c.pending[corr], nil
			delete(c.pending, corr)
			c.sync = -1
			if v, ok := c.syncs[corr]; ok {
				c.sync = v
				delete(c.syncs, corr)
			}
		}
		k := min(len(b), c.remain)
		if c.keep != nil || c.sync >= 0 {
			c.body = append(c.body, b[:k]...)
		}
		b = b[k:]
		c.remain -= k
		var req *kmsg.OffsetCommitRequest
		var body []byte
		sync := int16(-1)
		if c.remain <= 0 {
			req, body, sync = c.keep, c.body, c.sync
			c.hdrN, c.keep, c.body, c.sync = 0, nil, nil, -1
		}
		c.mu.Unlock()
		if req != nil {
			resp, err := offsetCommitResponse(req, body)
			c.finish(req, resp, err)
		}
		if sync >= 0 {
			if parts, ok := syncAssignment(sync, body, c.w.topic); ok {
				c.w.assign(parts)
			}
		}
	}
}

// offsetCommitRequest decodes b when it is a whole OffsetCommit request
// (size, API key, version, correlation id, client id, the tags of a
// flexible header, body). One it cannot decode still counts, naming no
// offsets.
func offsetCommitRequest(b []byte) (*kmsg.OffsetCommitRequest, int32, bool) {
	if len(b) < 14 || int16(binary.BigEndian.Uint16(b[4:])) != offsetCommitKey {
		return nil, 0, false
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = int16(binary.BigEndian.Uint16(b[6:]))
	corr := int32(binary.BigEndian.Uint32(b[8:]))
	rest := b[12:]
	if l := int(int16(binary.BigEndian.Uint16(rest))); l > 0 && l+2 <= len(rest) {
		rest = rest[2+l:]
	} else {
		rest = rest[2:]
	}
	if err := readBody(req, rest); err != nil {
		req = kmsg.NewPtrOffsetCommitRequest()
	}
	return req, corr, true
}

// readBody decodes m from b, what follows the correlation id (a
// response) or the client id (a request): a flexible version's header
// tags, then the body.
func readBody(m interface {
	IsFlexible() bool
	ReadFrom([]byte) error
}, b []byte) error {
	var err error
	if m.IsFlexible() {
		b, err = skipTags(b)
	}
	if err == nil {
		err = m.ReadFrom(b)
	}
	return err
}

// offsetCommitResponse decodes the body of the answer to req (what
// follows the correlation id).
func offsetCommitResponse(req *kmsg.OffsetCommitRequest, body []byte) (*kmsg.OffsetCommitResponse, error) {
	resp := kmsg.NewPtrOffsetCommitResponse()
	resp.Version = req.Version
	if err := readBody(resp, body); err != nil {
		return nil, fmt.Errorf("undecodable OffsetCommit response: %w", err)
	}
	return resp, nil
}

// syncAssignment decodes a SyncGroup response of version v (what follows
// the correlation id) and returns the member's partitions of topic, or
// false when the coordinator refused the sync or the body is not one.
func syncAssignment(v int16, body []byte, topic string) ([]int32, bool) {
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.Version = v
	if err := readBody(resp, body); err != nil || resp.ErrorCode != 0 {
		return nil, false
	}
	var a kmsg.ConsumerMemberAssignment
	if len(resp.MemberAssignment) > 0 {
		if err := a.ReadFrom(resp.MemberAssignment); err != nil {
			return nil, false
		}
	}
	parts := []int32{}
	for _, t := range a.Topics {
		if t.Topic == topic {
			parts = append(parts, t.Partitions...)
		}
	}
	slices.Sort(parts)
	return parts, true
}

// skipTags skips a flexible header's tagged fields.
func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("bad tag count")
	}
	b = b[k:]
	for range n {
		if _, k = binary.Uvarint(b); k <= 0 {
			return nil, errors.New("bad tag")
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < size {
			return nil, errors.New("bad tag size")
		}
		b = b[k+int(size):]
	}
	return b, nil
}
