package nemesis

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/netip"
	"slices"
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
	nfqaPhysOutDev    = 8
	nfqaHWAddr        = 9
	nfqaPayload       = 10
	nfqaCfgCmd        = 1
	nfqaCfgParams     = 2
	nfqaCfgQueueMaxln = 3
	nfqnlCfgCmdBind   = 1
	nfqnlCopyMeta     = 1
	nfqnlCopyPacket   = 2
	nfAccept          = 1
)

// DelayerConfig configures a packet delayer: an NFQUEUE listener that
// holds every packet steered to its queue for Delay ± Jitter (uniform),
// then accepts it, and plays the packet faults of Packet on the way.
type DelayerConfig struct {
	NetNS  string // the namespace whose queue it serves (the switch)
	Queue  uint16
	Delay  time.Duration
	Jitter time.Duration
	Packet PacketConfig
	Seed   int64
	// Ready, if set, is called once the queue is bound.
	Ready func()
}

// PacketConfig is what a delayer does to packets besides delaying them;
// probabilities are in [0, 1].
type PacketConfig struct {
	// Duplicate: the packet is accepted and a copy of it is sent after it
	// (on the bridge port it was leaving by, addressed to the MAC address
	// MACs gives its destination; a destination without one is not
	// duplicated).
	Duplicate float64
	// Reorder: the packet is held back Gap longer, so that the packets
	// after it overtake it.
	Reorder float64
	Gap     time.Duration
	// Corrupt: one random bit of the packet's transport payload (after the
	// TCP or UDP header; packets without payload and IP fragments other
	// than the first are left alone) is flipped. With FixChecksum the TCP
	// or UDP checksum is computed again, so that the corruption reaches the
	// receiving application; without, the receiver's kernel finds the
	// checksum wrong and drops the packet (for TCP: a loss, retransmitted).
	Corrupt     float64
	FixChecksum bool
	// Correlation makes each draw lean on the previous one of its kind
	// (netem's model): next = Correlation*previous + (1-Correlation)*uniform.
	Correlation float64
	MACs        map[netip.Addr]net.HardwareAddr
	// DupMark, on a delayer in a node's own namespace, sends duplicates
	// through a raw IPv4 socket instead, marked DupMark so that the node's
	// queue rules let them pass: to a peer by the node's output hook, to
	// the node itself back in through loopback. MACs are then not needed.
	DupMark uint32
}

// copiesPackets reports whether the delayer needs the packets' bytes (not
// only their ids).
func (p PacketConfig) copiesPackets() bool { return p.Duplicate > 0 || p.Corrupt > 0 }

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
	if err := queueConfig(conn, cfg.Queue, cfg.Packet.copiesPackets()); err != nil {
		return err
	}
	d := &delayer{conn: conn, queue: cfg.Queue, rng: rand.New(rand.NewSource(cfg.Seed)),
		delay: cfg.Delay, jitter: cfg.Jitter, pkt: cfg.Packet, wake: make(chan struct{}, 1)}
	if cfg.Packet.Duplicate > 0 && cfg.Packet.DupMark != 0 {
		fd, err := markedRawSocket(cfg.Packet.DupMark)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		d.rawIP = fd
	} else if cfg.Packet.Duplicate > 0 {
		// Copies go out on a packet socket of the switch namespace (this
		// process lives there), straight to the port: no hook sees them.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return fmt.Errorf("delayer: packet socket for duplicates: %w", err)
		}
		defer unix.Close(fd)
		d.raw = fd
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
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
			if p, ok := parsePacket(m); ok {
				d.hold(p, now)
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

// queueConfig binds the queue, copying whole packets (up to 64 KiB; the
// kernel segments GSO packets and completes partial checksums first) or
// only their metadata.
func queueConfig(conn *netlink.Conn, queue uint16, copyPacket bool) error {
	cmd := make([]byte, 4) // command, pad, pf (be16)
	cmd[0] = nfqnlCfgCmdBind
	params := make([]byte, 5) // copy range (be32, 0: the most), copy mode
	params[4] = nfqnlCopyMeta
	if copyPacket {
		params[4] = nfqnlCopyPacket
	}
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

// queuedPacket is a packet the kernel handed over, and what the delayer does
// with it.
type queuedPacket struct {
	id      uint32
	payload []byte // the IPv4 packet (copy mode packet only)
	srcMAC  net.HardwareAddr
	physOut uint32 // the bridge port it leaves by, 0 if unknown
	mangled bool   // payload was changed: the verdict carries it
	dup     bool   // send a copy after it
}

// parsePacket reads a queued packet message.
func parsePacket(m netlink.Message) (*queuedPacket, bool) {
	if m.Header.Type != netlink.HeaderType(nfnlSubsysQueue<<8|nfqnlMsgPacket) || len(m.Data) < 4 {
		return nil, false
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return nil, false
	}
	var p queuedPacket
	ok := false
	for ad.Next() {
		b := ad.Bytes()
		switch ad.Type() {
		case nfqaPacketHdr:
			if len(b) >= 4 {
				p.id, ok = binary.BigEndian.Uint32(b), true
			}
		case nfqaPayload:
			p.payload = slices.Clone(b)
		case nfqaHWAddr: // be16 length, pad, address
			if len(b) >= 4 {
				if n := int(binary.BigEndian.Uint16(b)); n == 6 && len(b) >= 4+n {
					p.srcMAC = net.HardwareAddr(slices.Clone(b[4 : 4+n]))
				}
			}
		case nfqaPhysOutDev:
			if len(b) >= 4 {
				p.physOut = binary.BigEndian.Uint32(b)
			}
		}
	}
	return &p, ok
}

type heldPacket struct {
	due time.Time
	p   *queuedPacket
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
	pkt           PacketConfig
	raw           int // packet socket for duplicates, 0 if none
	rawIP         int // raw IPv4 socket for node-side duplicates, 0 if none
	rng           *rand.Rand
	// The previous draw of each packet fault, for Correlation.
	lastDup, lastReorder, lastCorrupt float64

	mu     sync.Mutex
	held   packetHeap
	closed bool
	wake   chan struct{}
}

// draw reports whether a packet fault of probability prob hits, given the
// previous draw of its kind in *last.
func (d *delayer) draw(prob float64, last *float64) bool {
	if prob <= 0 {
		return false
	}
	v := d.rng.Float64()
	if c := d.pkt.Correlation; c > 0 {
		v = c*(*last) + (1-c)*v
	}
	*last = v
	return v < prob
}

// hold decides what happens to p and accepts it at once or when due.
func (d *delayer) hold(p *queuedPacket, now time.Time) {
	wait := d.delay
	if d.jitter > 0 {
		wait += time.Duration(d.rng.Int63n(int64(2*d.jitter))) - d.jitter
	}
	if d.draw(d.pkt.Reorder, &d.lastReorder) {
		wait += d.pkt.Gap
	}
	if d.draw(d.pkt.Corrupt, &d.lastCorrupt) && p.payload != nil {
		p.mangled = corruptPacket(p.payload, d.rng, d.pkt.FixChecksum)
	}
	p.dup = d.draw(d.pkt.Duplicate, &d.lastDup)
	if wait <= 0 {
		d.accept(p)
		return
	}
	d.mu.Lock()
	heap.Push(&d.held, heldPacket{due: now.Add(wait), p: p})
	first := d.held[0].p == p
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
		var due []*queuedPacket
		for len(d.held) > 0 && (d.closed || !d.held[0].due.After(now)) {
			due = append(due, heap.Pop(&d.held).(heldPacket).p)
		}
		next := time.Hour
		if len(d.held) > 0 {
			next = d.held[0].due.Sub(now)
		}
		closed := d.closed
		d.mu.Unlock()
		for _, p := range due {
			d.accept(p)
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

// accept gives the kernel its verdict on p (with p's bytes if they were
// changed), then sends p's copy if it is to be duplicated.
func (d *delayer) accept(p *queuedPacket) {
	v := make([]byte, 8)
	binary.BigEndian.PutUint32(v, nfAccept)
	binary.BigEndian.PutUint32(v[4:], p.id)
	attrs := []netlink.Attribute{{Type: nfqaVerdictHdr, Data: v}}
	if p.mangled {
		attrs = append(attrs, netlink.Attribute{Type: nfqaPayload, Data: p.payload})
	}
	b, _ := netlink.MarshalAttributes(attrs)
	d.conn.Send(netlink.Message{ //nolint:errcheck // a lost verdict drops one packet when the queue goes
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysQueue<<8 | nfqnlMsgVerdict), Flags: netlink.Request},
		Data:   append(nfgen(d.queue), b...),
	})
	if p.dup {
		d.duplicate(p)
	}
}

// duplicate sends a copy of p's frame out of the bridge port p left by,
// to its destination's MAC address. A packet whose port, source or
// destination address is unknown is not duplicated.
func (d *delayer) duplicate(p *queuedPacket) {
	if d.rawIP != 0 {
		if len(p.payload) >= 20 {
			to := &unix.SockaddrInet4{Addr: [4]byte(p.payload[16:20])}
			unix.Sendto(d.rawIP, p.payload, 0, to) //nolint:errcheck // a lost copy is a duplicate less
		}
		return
	}
	if d.raw == 0 || p.physOut == 0 || p.srcMAC == nil || len(p.payload) < 20 {
		return
	}
	dst, ok := d.pkt.MACs[netip.AddrFrom4([4]byte(p.payload[16:20]))]
	if !ok {
		return
	}
	frame := make([]byte, 0, 14+len(p.payload))
	frame = append(append(append(frame, dst...), p.srcMAC...), 0x08, 0x00)
	frame = append(frame, p.payload...)
	to := &unix.SockaddrLinklayer{Ifindex: int(p.physOut), Protocol: htons(unix.ETH_P_IP), Halen: 6}
	copy(to.Addr[:], dst)
	unix.Sendto(d.raw, frame, 0, to) //nolint:errcheck // a lost copy is a duplicate less
}

// markedRawSocket opens a raw IPv4 socket (the caller writes whole packets,
// headers included) whose packets carry mark.
func markedRawSocket(mark uint32) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		return 0, fmt.Errorf("delayer: raw socket for duplicates: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, int(mark)); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("delayer: mark duplicates: %w", err)
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// corruptPacket flips one random bit of an IPv4 packet's TCP or UDP
// payload, and with fix computes the transport checksum again. It reports
// whether it changed anything: packets without payload, IP fragments
// other than the first and other protocols are left alone.
func corruptPacket(pkt []byte, rng *rand.Rand, fix bool) bool {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return false
	}
	ihl := int(pkt[0]&0x0f) * 4
	total := min(int(binary.BigEndian.Uint16(pkt[2:4])), len(pkt))
	if ihl < 20 || total <= ihl || binary.BigEndian.Uint16(pkt[6:8])&0x1fff != 0 {
		return false
	}
	seg := pkt[ihl:total]
	var hdr, sum int
	switch pkt[9] {
	case unix.IPPROTO_TCP:
		if len(seg) < 20 {
			return false
		}
		hdr, sum = int(seg[12]>>4)*4, 16
	case unix.IPPROTO_UDP:
		hdr, sum = 8, 6
	default:
		return false
	}
	if len(seg) <= hdr {
		return false
	}
	bit := rng.Intn((len(seg) - hdr) * 8)
	seg[hdr+bit/8] ^= 1 << (bit % 8)
	if fix {
		if pkt[9] == unix.IPPROTO_UDP && binary.BigEndian.Uint16(seg[sum:]) == 0 {
			return true // no UDP checksum to fix
		}
		binary.BigEndian.PutUint16(seg[sum:], 0)
		c := transportChecksum(pkt[12:16], pkt[16:20], pkt[9], seg)
		if c == 0 && pkt[9] == unix.IPPROTO_UDP {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(seg[sum:], c)
	}
	return true
}

// transportChecksum is the Internet checksum of a TCP or UDP segment with
// its IPv4 pseudo-header.
func transportChecksum(src, dst []byte, proto byte, seg []byte) uint16 {
	var s uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	add(src)
	add(dst)
	s += uint32(proto) + uint32(len(seg))
	add(seg)
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
