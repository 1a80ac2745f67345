package nemesis

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nfnetlink queue protocol (linux/netfilter/nfnetlink_queue.h).
const (
	nfnlSubsysQueue   = 3
	nfqnlMsgPacket    = 0
	nfqnlMsgVerdict   = 1
	nfqnlMsgConfig    = 2
	nfqaPacketHdr     = 1
	nfqaVerdictHdr    = 2
	nfqaCfgCmd        = 1
	nfqaCfgParams     = 2
	nfqaCfgQueueMaxln = 3
	nfqnlCfgCmdBind   = 1
	nfqnlCopyMeta     = 1
	nfAccept          = 1
)

// DelayerConfig configures a packet delayer: an NFQUEUE listener that
// holds every packet steered to its queue for Delay ± Jitter (uniform),
// then accepts it.
type DelayerConfig struct {
	NetNS  string // the namespace whose queue it serves (the switch)
	Queue  uint16
	Delay  time.Duration
	Jitter time.Duration
	Seed   int64
	// Ready, if set, is called once the queue is bound.
	Ready func()
}

// RunDelayer serves the queue until ctx ends, then releases every held
// packet at once and returns. This kernel lacks netem; it is how
// slow-net delays packets here (see SlowNet).
func RunDelayer(ctx context.Context, cfg DelayerConfig) error {
	ns, err := netns.GetFromPath(cfg.NetNS)
	if err != nil {
		return fmt.Errorf("delayer: open netns %s: %w", cfg.NetNS, err)
	}
	defer ns.Close()
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(ns)})
	if err != nil {
		return fmt.Errorf("delayer: netlink: %w", err)
	}
	defer conn.Close()
	conn.SetReadBuffer(8 << 20)             //nolint:errcheck // a smaller buffer only drops more under bursts
	conn.SetOption(netlink.NoENOBUFS, true) //nolint:errcheck
	if err := queueConfig(conn, cfg.Queue); err != nil {
		return err
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	d := &delayer{conn: conn, queue: cfg.Queue, rng: rand.New(rand.NewSource(cfg.Seed)),
		delay: cfg.Delay, jitter: cfg.Jitter, wake: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.release()
	}()
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var rerr error
	for ctx.Err() == nil {
		msgs, err := conn.Receive()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			// ENOBUFS: messages were lost under a burst. ENOENT: a verdict
			// named a packet the kernel no longer holds: it drops every
			// queued packet of the namespace when a netfilter hook goes,
			// as when another fault's table is deleted. Neither ends the
			// delay; quitting would let every packet bypass the queue.
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOENT) {
				continue
			}
			rerr = fmt.Errorf("delayer: receive: %w", err)
			break
		}
		now := time.Now()
		for _, m := range msgs {
			if id, ok := packetID(m); ok {
				d.hold(id, now)
			}
		}
	}
	d.close()
	wg.Wait()
	return rerr
}

func nfgen(queue uint16) []byte {
	b := []byte{unix.AF_UNSPEC, 0, 0, 0}
	binary.BigEndian.PutUint16(b[2:], queue)
	return b
}

func queueConfig(conn *netlink.Conn, queue uint16) error {
	cmd := make([]byte, 4) // command, pad, pf (be16)
	cmd[0] = nfqnlCfgCmdBind
	params := make([]byte, 5) // copy range (be32), copy mode
	params[4] = nfqnlCopyMeta
	maxlen := binary.BigEndian.AppendUint32(nil, 100000)
	for _, attrs := range [][]netlink.Attribute{
		{{Type: nfqaCfgCmd, Data: cmd}},
		{{Type: nfqaCfgParams, Data: params}, {Type: nfqaCfgQueueMaxln, Data: maxlen}},
	} {
		b, err := netlink.MarshalAttributes(attrs)
		if err != nil {
			return err
		}
		_, err = conn.Execute(netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysQueue<<8 | nfqnlMsgConfig),
				Flags: netlink.Request | netlink.Acknowledge},
			Data: append(nfgen(queue), b...),
		})
		if err != nil {
			return fmt.Errorf("delayer: bind queue %d: %w", queue, err)
		}
	}
	return nil
}

// packetID returns the id of a queued packet message.
func packetID(m netlink.Message) (uint32, bool) {
	if m.Header.Type != netlink.HeaderType(nfnlSubsysQueue<<8|nfqnlMsgPacket) || len(m.Data) < 4 {
		return 0, false
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return 0, false
	}
	for ad.Next() {
		if ad.Type() == nfqaPacketHdr {
			if b := ad.Bytes(); len(b) >= 4 {
				return binary.BigEndian.Uint32(b), true
			}
		}
	}
	return 0, false
}

type heldPacket struct {
	due time.Time
	id  uint32
}

type packetHeap []heldPacket

func (h packetHeap) Len() int           { return len(h) }
func (h packetHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h packetHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *packetHeap) Push(x any)        { *h = append(*h, x.(heldPacket)) }
func (h *packetHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type delayer struct {
	conn          *netlink.Conn
	queue         uint16
	delay, jitter time.Duration
	rng           *rand.Rand

	mu     sync.Mutex
	held   packetHeap
	closed bool
	wake   chan struct{}
}

func (d *delayer) hold(id uint32, now time.Time) {
	wait := d.delay
	if d.jitter > 0 {
		wait += time.Duration(d.rng.Int63n(int64(2*d.jitter))) - d.jitter
	}
	d.mu.Lock()
	heap.Push(&d.held, heldPacket{due: now.Add(max(wait, 0)), id: id})
	first := d.held[0].id == id
	d.mu.Unlock()
	if first {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

func (d *delayer) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// release accepts each held packet when it is due; once closed, it
// accepts whatever is left and returns.
func (d *delayer) release() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.mu.Lock()
		now := time.Now()
		var due []uint32
		for len(d.held) > 0 && (d.closed || !d.held[0].due.After(now)) {
			due = append(due, heap.Pop(&d.held).(heldPacket).id)
		}
		next := time.Hour
		if len(d.held) > 0 {
			next = d.held[0].due.Sub(now)
		}
		closed := d.closed
		d.mu.Unlock()
		for _, id := range due {
			d.accept(id)
		}
		if closed {
			return
		}
		timer.Reset(next)
		select {
		case <-timer.C:
		case <-d.wake:
		}
	}
}

func (d *delayer) accept(id uint32) {
	v := make([]byte, 8)
	binary.BigEndian.PutUint32(v, nfAccept)
	binary.BigEndian.PutUint32(v[4:], id)
	b, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: nfqaVerdictHdr, Data: v}})
	d.conn.Send(netlink.Message{ //nolint:errcheck // a lost verdict drops one packet when the queue goes
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysQueue<<8 | nfqnlMsgVerdict), Flags: netlink.Request},
		Data:   append(nfgen(d.queue), b...),
	})
}
