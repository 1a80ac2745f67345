package kproxy

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// pairState is the protocol state of one connection pair: the requests
// in flight, in order, and the queue of frames for the client. It does no
// I/O, so that tests and the fuzzer drive it directly.
type pairState struct {
	p    *Proxy
	log  *slog.Logger
	mu   sync.Mutex
	cond *sync.Cond
	// fifo holds the requests whose response is due, oldest first. Its
	// head is never a synthetic entry: one is moved to out as soon as it
	// reaches the head.
	fifo   []*inflight
	out    []outItem
	closed bool
}

// inflight is one request whose response is due.
type inflight struct {
	corr         int32
	key, version int16
	resp         *compiled // the response rule that acts on its response
	swallow      bool      // the second response of a duplicated request
	synth        []byte    // a response the proxy makes (size prefix included)
}

// outItem is one frame for the client, or a close.
type outItem struct {
	frame      []byte
	delay      time.Duration
	close      bool
	fromBroker bool
}

// reqPlan is what to do with a request frame.
type reqPlan struct {
	forward int // times to forward it
	delay   time.Duration
	close   bool
}

func newPairState(p *Proxy, log *slog.Logger) *pairState {
	s := &pairState{p: p, log: log}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// next waits for the next item for the client; false once the pair closed.
func (s *pairState) next() (outItem, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.out) == 0 && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return outItem{}, false
	}
	it := s.out[0]
	s.out[0] = outItem{}
	s.out = s.out[1:]
	return it, true
}

func (s *pairState) push(it outItem) {
	s.out = append(s.out, it)
	s.cond.Signal()
}

// flush moves synthetic responses at the head of the FIFO to the client
// queue.
func (s *pairState) flush() {
	for len(s.fifo) > 0 && s.fifo[0].synth != nil {
		s.push(outItem{frame: s.fifo[0].synth})
		s.fifo[0] = nil
		s.fifo = s.fifo[1:]
	}
}

// onRequest runs the rules on a request frame (size prefix included),
// records it as in flight and says what to do with it. An error means the
// connection pair must close.
func (s *pairState) onRequest(raw []byte) (reqPlan, error) {
	if len(raw) < 4 {
		return reqPlan{}, fmt.Errorf("request frame of %d bytes", len(raw))
	}
	frame := raw[4:]
	h, err := parseRequestHeader(frame)
	if err != nil {
		return reqPlan{}, err
	}
	var prod *produceInfo
	if h.Known && h.Key == int16(kmsg.Produce) {
		pi, err := parseProduce(h.Version, frame[h.BodyOff:])
		if err != nil {
			return reqPlan{}, err
		}
		prod = &pi
	}
	noResp := prod != nil && prod.Acks == 0
	d := s.p.decide(h, frame[h.BodyOff:], prod, noResp)
	e := &inflight{corr: h.Corr, key: h.Key, version: h.Version, resp: d.resp}
	log := s.log
	if d.req != nil || d.resp != nil {
		log = s.log.With("api", kmsg.NameForKey(h.Key), "version", h.Version, "corr", h.Corr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	plan := reqPlan{forward: 1}
	enqueue := !noResp
	if d.req != nil {
		log.Info("kproxy: fault on request", "rule", d.req.ID, "action", d.req.Action)
		switch d.req.Action {
		case ActDrop:
			plan.forward, enqueue = 0, false
		case ActDelay:
			plan.delay = d.req.delay
		case ActDuplicate:
			plan.forward = 2
			if enqueue {
				s.fifo = append(s.fifo, e)
				e = &inflight{corr: h.Corr, key: h.Key, version: h.Version, swallow: true}
			}
		case ActError:
			plan.forward = 0
			if enqueue {
				resp, err := produceErrorResponse(h.Corr, h.Version, frame[h.BodyOff:], d.req.code)
				if err != nil {
					log.Warn("kproxy: cannot answer the request with an error, forwarded", "err", err)
					plan.forward = 1
				} else {
					e = &inflight{corr: h.Corr, synth: withSize(resp)}
				}
			}
		case ActClose:
			plan.forward, plan.close, enqueue = 0, true, false
		}
	}
	if enqueue && !s.closed {
		s.fifo = append(s.fifo, e)
		s.flush()
	}
	return plan, nil
}

// onResponse matches a response frame (size prefix included) with its
// request and queues what the client gets. An error means the connection
// pair must close.
func (s *pairState) onResponse(raw []byte) error {
	if len(raw) < 8 {
		return fmt.Errorf("response frame of %d bytes: no correlation id", len(raw))
	}
	frame := raw[4:]
	corr := int32(binary.BigEndian.Uint32(frame))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	idx := -1
	for i, e := range s.fifo {
		if e.synth == nil && e.corr == corr {
			idx = i
			break
		}
	}
	if idx < 0 {
		head := int32(-1)
		if len(s.fifo) > 0 {
			head = s.fifo[0].corr
		}
		s.log.Warn("kproxy: response matches no request in flight, forwarded as is", "corr", corr, "expected", head)
		s.push(outItem{frame: raw, fromBroker: true})
		return nil
	}
	if idx > 0 {
		s.log.Warn("kproxy: response out of order, requests before it forgotten", "corr", corr, "expected", s.fifo[0].corr, "forgotten", idx)
		for _, e := range s.fifo[:idx] {
			if e.synth != nil {
				s.push(outItem{frame: e.synth})
			}
		}
	}
	e := s.fifo[idx]
	clear(s.fifo[:idx+1])
	s.fifo = s.fifo[idx+1:]
	defer s.flush()
	switch {
	case e.swallow:
		s.log.Debug("kproxy: second response of a duplicated request swallowed", "corr", corr)
		return nil
	case e.resp == nil:
		s.push(outItem{frame: raw, fromBroker: true})
		return nil
	}
	r := e.resp
	log := s.log.With("api", kmsg.NameForKey(e.key), "version", e.version, "corr", corr, "rule", r.ID, "action", r.Action)
	log.Info("kproxy: fault on response")
	switch r.Action {
	case ActDrop:
	case ActDelay:
		s.push(outItem{frame: raw, delay: r.delay, fromBroker: true})
	case ActError:
		out, err := rewriteErrors(frame, e.key, e.version, r.code)
		if err != nil {
			log.Warn("kproxy: response not rewritten, forwarded as is", "err", err)
			s.push(outItem{frame: raw, fromBroker: true})
			return nil
		}
		s.push(outItem{frame: withSize(out), fromBroker: true})
	case ActClose:
		s.push(outItem{close: true})
	default:
		s.push(outItem{frame: raw, fromBroker: true})
	}
	return nil
}
