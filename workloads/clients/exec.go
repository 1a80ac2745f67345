package clients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/kafkaconfig"
	"github.com/isrlab/isrlab/workloads"
)

// ProtocolVersion is the version of docs/client-protocol.md the exec driver
// speaks.
const ProtocolVersion = 1

// FeatureTxn is the protocol's optional feature for the txn workload:
// transactional producer processes (open-transactional-producer, begin,
// produce, end) and read_committed consumers. The lab's hello asks for
// it; a driver names it in its own hello when it runs them.
const FeatureTxn = "txn"

// FeatureQueue is the protocol's optional feature for the queue
// workload: consumer group members (open-group-consumer, commit, crash),
// whose completions carry the member's assignments and its client's own
// commits as events (docs/client-protocol.md, "Consumer groups").
const FeatureQueue = "queue"

// FeatureSecurity is the protocol's optional feature for a secured
// cluster: the lab's hello then carries the client's security settings
// (its security object, in Kafka's client config names, the SASL
// password among them), and a driver names it in its own hello when it
// connects with them. A driver that does not know it refuses the hello
// as it refuses any feature it does not run, instead of connecting in
// plaintext to listeners that speak TLS.
const FeatureSecurity = "security"

// featureWhat is what a driver without the feature does not run, for
// the refusal.
var featureWhat = map[string]string{FeatureTxn: "transactions", FeatureQueue: "consumer groups (the queue workload)",
	FeatureSecurity: "a secured cluster (TLS and SASL with the hello's security settings)"}

// ErrDriver is wrapped by the errors of an exec driver that crashed,
// printed something that is not a completion, or hung.
var ErrDriver = errors.New("exec driver failed")

// execHello is the lab's first line to the driver.
type execHello struct {
	Type       string            `json:"type"` // "hello"
	Protocol   int               `json:"protocol"`
	Bootstrap  []string          `json:"bootstrap"`
	Topic      string            `json:"topic"`
	Partitions int32             `json:"partitions"`
	Config     map[string]string `json:"config"`
	Client     map[string]string `json:"client.config,omitempty"`
	// Features are the optional features the workload needs (FeatureTxn,
	// FeatureQueue) and the cluster (FeatureSecurity).
	Features []string `json:"features,omitempty"`
	// Security is, on a secured cluster only, how the driver's clients
	// connect, in Kafka's client config names (securityOf): it holds the
	// SASL password, so the hello is written to the driver's stdin and
	// nowhere else.
	Security map[string]string `json:"security,omitempty"`
}

// execHelloReply is the driver's first line.
type execHelloReply struct {
	Type   string `json:"type"` // "hello" or "refused"
	Client string `json:"client"`
	PID    int    `json:"pid"`
	Error  string `json:"error"`
	// Features are the optional features the driver runs.
	Features []string `json:"features"`
}

// execOp is one operation the lab asks for.
type execOp struct {
	ID         int64   `json:"id"`
	Process    int     `json:"process"`
	F          string  `json:"f"` // open-producer, open-consumer, send, poll, close; with FeatureTxn open-transactional-producer, begin, produce, end; with FeatureQueue open-group-consumer, commit, crash
	TimeNs     int64   `json:"time_ns"`
	TimeoutMs  int64   `json:"timeout_ms"`
	Partitions []int32 `json:"partitions,omitempty"`
	Partition  *int32  `json:"partition,omitempty"`
	Key        string  `json:"key,omitempty"`
	Value      string  `json:"value,omitempty"`
	// FeatureTxn's fields.
	Isolation            string       `json:"isolation,omitempty"` // open-consumer: read_committed
	TransactionalID      string       `json:"transactional_id,omitempty"`
	TransactionTimeoutMs int64        `json:"transaction_timeout_ms,omitempty"`
	Records              []execRecord `json:"records,omitempty"` // produce
	Commit               *bool        `json:"commit,omitempty"`  // end
	// FeatureQueue's fields.
	Group                string       `json:"group,omitempty"`       // open-group-consumer
	AutoCommit           bool         `json:"auto_commit,omitempty"` // open-group-consumer
	AutoCommitIntervalMs int64        `json:"auto_commit_interval_ms,omitempty"`
	Offsets              []execOffset `json:"offsets,omitempty"` // commit
}

// execOffset is a partition's offset: one a commit asks for, or one
// committed.
type execOffset struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// execEvent is what happened to a group member while the driver
// performed one of its operations: its partitions were assigned or
// revoked (Event "assigned"; Partitions empty when revoked), or its
// client committed on its own (Event "committed", with the commit's
// outcome as a commit operation's completion gives it).
type execEvent struct {
	Event      string       `json:"event"`
	Partitions []int32      `json:"partitions"`
	Type       string       `json:"type"`
	Committed  []execOffset `json:"committed"`
	Error      string       `json:"error"`
}

// execRecord is one record of a produce operation.
type execRecord struct {
	Partition int32  `json:"partition"`
	Key       string `json:"key,omitempty"`
	Value     string `json:"value"`
}

// execDone is the driver's completion of an operation.
type execDone struct {
	ID      *int64 `json:"id"`
	Process *int   `json:"process"`
	Type    string `json:"type"` // ok, fail or info
	Offset  *int64 `json:"offset"`
	Error   string `json:"error"`
	Records []struct {
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Value     string `json:"value"`
	} `json:"records"`
	// Offsets are a produce's records' offsets, -1 for those not
	// acknowledged; Done says a transactional producer can run no more
	// transactions.
	Offsets []int64 `json:"offsets"`
	Done    bool    `json:"done"`
	// FeatureQueue's: a commit's offsets, and a group member's events.
	Committed []execOffset `json:"committed"`
	Events    []execEvent  `json:"events"`
}

// execClient runs a driver process for the workload's producers and
// assigned consumers, one operation of a process at a time, processes
// side by side.
type execClient struct {
	cfg   workloads.Config
	spec  workloads.ClientSpec
	env   Env
	grace time.Duration

	once     sync.Once
	startErr error
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	wmu      sync.Mutex // stdin
	stderr   *tail
	log      *redactedLog // the whole stderr, with env.DriverLog
	hello    execHelloReply
	exited   chan struct{} // closed once the process was waited for
	waitErr  error

	mu      sync.Mutex
	nextID  int64
	pending map[int64]*execPending
	busy    map[int]bool // processes with an operation in flight
	dead    chan struct{}
	err     error
	closing bool

	// want are the features the workload needs whichever process opens
	// first (FeatureQueue when cfg.Subscribe: the queue workload).
	want []string

	// secret is the SASL password the hello gives the driver, kept out
	// of everything the lab takes from it (redact).
	secret string

	// name is the client's, when a driver of this package runs it
	// (librdkafka, kafka-python); cleanup runs once it exited.
	name    string
	cleanup func()
}

type execPending struct {
	process int
	done    chan execDone
}

// hangGrace is how long past an operation's own timeout the lab waits for
// its completion before it takes the driver for hung.
const hangGrace = 10 * time.Second

func newExec(cfg workloads.Config, spec workloads.ClientSpec, env Env) *execClient {
	grace := env.HangGrace
	if grace <= 0 {
		grace = hangGrace
	}
	e := &execClient{cfg: cfg.WithDefaults(), spec: spec, env: env, grace: grace,
		pending: map[int64]*execPending{}, busy: map[int]bool{}, dead: make(chan struct{}), exited: make(chan struct{})}
	if cfg.Subscribe {
		e.want = []string{FeatureQueue}
	}
	if env.Security != nil {
		e.want = append(e.want, FeatureSecurity)
	}
	return e
}

func (e *execClient) Name() string {
	if e.name != "" {
		return e.name
	}
	return Exec
}

// kafkaConfig is the workload's Kafka-named settings in Kafka's own names
// and units, as the driver's client takes them.
func kafkaConfig(c workloads.Config) map[string]string {
	retries := "2147483647" // isrlab's 0: until delivery.timeout.ms
	switch {
	case c.Retries < 0:
		retries = "0"
	case c.Retries > 0:
		retries = strconv.Itoa(c.Retries)
	}
	acks := c.Acks
	if acks == "-1" {
		acks = "all"
	}
	m := map[string]string{
		"acks":                acks,
		"enable.idempotence":  strconv.FormatBool(c.Idempotent),
		"retries":             retries,
		"request.timeout.ms":  strconv.FormatInt(c.RequestTimeout.Milliseconds(), 10),
		"delivery.timeout.ms": strconv.FormatInt(c.DeliveryTimeout.Milliseconds(), 10),
		"linger.ms":           strconv.FormatInt(c.Linger.Milliseconds(), 10),
	}
	if c.MaxInFlight > 0 {
		m["max.in.flight.requests.per.connection"] = strconv.Itoa(c.MaxInFlight)
	}
	return m
}

// helloOf is the lab's hello to a driver for cfg (with its defaults),
// own (client.config) and the bootstrap brokers, asking for features.
// With FeatureTxn its config also has the workload's
// transaction.timeout.ms, for the driver to check its client's
// configuration with.
func helloOf(cfg workloads.Config, own map[string]string, seeds []string, features ...string) execHello {
	if seeds == nil {
		seeds = []string{}
	}
	h := execHello{Type: "hello", Protocol: ProtocolVersion, Bootstrap: seeds, Topic: cfg.Topic,
		Partitions: cfg.Partitions, Config: kafkaConfig(cfg), Client: own, Features: features}
	if slices.Contains(features, FeatureTxn) {
		h.Config["transaction.timeout.ms"] = strconv.FormatInt(workloads.TxnTimeout(cfg).Milliseconds(), 10)
	}
	return h
}

// securityOf is the hello's security object for cs, and the password in
// it ("" without SASL): Kafka's client config names (the PEM files'
// librdkafka's), each there when cs sets it, and sasl.password the
// password itself, read from sasl.password.file when cs names one, so
// that a driver in another process reads no file of the lab's secrets
// directory.
func securityOf(cs kafkaconfig.ClientSecurity) (map[string]string, string, error) {
	if err := cs.Validate(); err != nil {
		return nil, "", err
	}
	m := map[string]string{"security.protocol": "PLAINTEXT"}
	if cs.Protocol != "" {
		m["security.protocol"] = strings.ToUpper(cs.Protocol)
	}
	var pw string
	if cs.SASL() {
		user, p, err := cs.Credentials()
		if err != nil {
			return nil, "", err
		}
		pw = p
		m["sasl.mechanism"], m["sasl.username"], m["sasl.password"] = cs.Mechanism, user, pw
	}
	if cs.TLS() {
		for k, v := range map[string]string{"ssl.ca.location": cs.CALocation, "ssl.certificate.location": cs.CertLocation,
			"ssl.key.location": cs.KeyLocation, "ssl.endpoint.identification.algorithm": cs.EndpointIdentification} {
			if v != "" {
				m[k] = v
			}
		}
	}
	return m, pw, nil
}

// redact replaces the hello's password in s, wherever the driver put it
// (its stderr, an error of its completions, a line that is not one), by
// [hidden]: nothing the lab records or reports holds it.
func (e *execClient) redact(s string) string { return redactSecret(s, e.secret) }

func redactSecret(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[hidden]")
}

// start runs the driver and exchanges the hellos, asking for the
// features the first caller needs (a workload's processes all need the
// same) and those the workload wants.
func (e *execClient) start(ctx context.Context, features ...string) error {
	e.once.Do(func() {
		for _, f := range e.want {
			if !slices.Contains(features, f) {
				features = append(features, f)
			}
		}
		e.startErr = e.run(ctx, features)
	})
	return e.startErr
}

// need reports a CapabilityError unless the driver's hello named
// feature.
func (e *execClient) need(feature string) error {
	if slices.Contains(e.hello.Features, feature) {
		return nil
	}
	return &workloads.CapabilityError{Client: e.Name(), Reason: fmt.Sprintf("%s names no %q feature in its hello: it does not run %s (docs/client-protocol.md)", e.argv(), feature, featureWhat[feature])}
}

func (e *execClient) argv() string { return strings.Join(e.spec.Exec, " ") }

// who names the driver: its command, and its pid once its hello gave it.
func (e *execClient) who() string {
	if e.hello.PID > 0 {
		return fmt.Sprintf("%s (pid %d)", e.argv(), e.hello.PID)
	}
	return e.argv()
}

func (e *execClient) run(ctx context.Context, features []string) error {
	cmd := exec.Command(e.spec.Exec[0], e.spec.Exec[1:]...)
	// Its own process group, so that a driver started by a wrapper
	// (a shell, a runtime) dies whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	hello := helloOf(e.cfg, e.spec.Config, e.env.Seeds, features...)
	if e.env.Security != nil {
		sec, pw, err := securityOf(*e.env.Security)
		if err != nil {
			return fmt.Errorf("%w: %s: the cluster's client security: %v", ErrDriver, e.argv(), err)
		}
		hello.Security, e.secret = sec, pw
	}
	e.stderr = &tail{max: 4096, secret: e.secret}
	cmd.Stderr = e.stderr
	if e.env.DriverLog != "" {
		log, err := createLog(e.env.DriverLog, e.secret)
		if err != nil {
			return fmt.Errorf("%w: %s: its log: %v", ErrDriver, e.argv(), err)
		}
		e.log = log
		cmd.Stderr = io.MultiWriter(e.stderr, log)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	start := e.env.Start
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		e.log.Close()
		return fmt.Errorf("%w: start %s: %v", ErrDriver, e.argv(), err)
	}
	e.cmd, e.stdin = cmd, stdin
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 64<<10), 64<<20)
	answered := make(chan error, 1)
	go e.read(lines, answered)
	if err := e.write(hello); err != nil {
		return err
	}
	t := time.NewTimer(e.cfg.RequestTimeout + e.grace)
	defer t.Stop()
	select {
	case err := <-answered:
		for _, f := range features {
			if err != nil {
				break
			}
			if err = e.need(f); err != nil {
				e.fail(err)
			}
		}
		return err
	case <-t.C:
		return e.fail(fmt.Errorf("%w: %s did not answer the hello within %s", ErrDriver, e.argv(), e.cfg.RequestTimeout+e.grace))
	case <-ctx.Done():
		return e.fail(fmt.Errorf("%w: %s: the run ended before its hello", ErrDriver, e.argv()))
	}
}

// read reads the driver's lines (the hello, then completions) until its
// output ends or it prints something else, then waits for its end.
func (e *execClient) read(lines *bufio.Scanner, hello chan<- error) {
	n, answered := e.readLines(lines, hello)
	err := lines.Err()
	e.waitErr = e.cmd.Wait()
	e.log.Close()
	close(e.exited)
	why := "closed its output"
	switch {
	case err != nil:
		why = "output unreadable: " + err.Error()
	case e.waitErr != nil:
		why = "exited: " + e.waitErr.Error()
	case e.cmd.ProcessState != nil:
		why = "exited: " + e.cmd.ProcessState.String()
	}
	e.mu.Lock()
	quiet := e.closing && len(e.pending) == 0
	e.mu.Unlock()
	if quiet {
		return
	}
	ferr := e.fail(fmt.Errorf("%w: %s %s after %d lines%s", ErrDriver, e.who(), why, n, e.stderr.last()))
	if !answered {
		hello <- ferr
	}
}

// readLines reads until the output ends or a line is not what the
// protocol allows (the driver is then failed). It returns how many lines
// it read and whether it answered hello.
func (e *execClient) readLines(lines *bufio.Scanner, hello chan<- error) (int, bool) {
	n := 0
	for lines.Scan() {
		n++
		line := lines.Bytes()
		if n == 1 {
			err := json.Unmarshal(line, &e.hello)
			switch {
			case err != nil || (e.hello.Type != "hello" && e.hello.Type != "refused"):
				err = e.fail(fmt.Errorf("%w: %s: its first line is not a hello: %q", ErrDriver, e.argv(), e.clip(line)))
			case e.hello.Type == "refused":
				err = e.fail(&workloads.CapabilityError{Client: e.Name(), Reason: fmt.Sprintf("%s refused the workload: %s", e.argv(), e.redact(e.hello.Error))})
			}
			hello <- err
			if err != nil {
				return n, true
			}
			continue
		}
		if err := e.complete(line); err != nil {
			e.fail(fmt.Errorf("%w: %s: line %d: %v", ErrDriver, e.who(), n, err))
			return n, true
		}
	}
	return n, n > 0
}

// complete hands a completion line to the operation it completes.
func (e *execClient) complete(line []byte) error {
	var d execDone
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return fmt.Errorf("not a completion: %q (%v)", e.clip(line), e.redact(err.Error()))
	}
	if d.ID == nil || d.Process == nil {
		return fmt.Errorf("a completion without id or process: %q", e.clip(line))
	}
	if _, ok := history.ParseType(d.Type); !ok || d.Type == "invoke" {
		return fmt.Errorf("completion %d: type %q: want ok, fail or info", *d.ID, e.redact(d.Type))
	}
	// Its errors go into the history.
	d.Error = e.redact(d.Error)
	for i := range d.Events {
		d.Events[i].Error = e.redact(d.Events[i].Error)
	}
	e.mu.Lock()
	p, ok := e.pending[*d.ID]
	if ok && p.process == *d.Process {
		delete(e.pending, *d.ID)
		delete(e.busy, p.process)
	}
	e.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("completion of operation %d, which is not in flight: %q", *d.ID, e.clip(line))
	case p.process != *d.Process:
		return fmt.Errorf("completion of operation %d names process %d; it is process %d's", *d.ID, *d.Process, p.process)
	}
	p.done <- d
	return nil
}

// fail records the driver's end (the first reason wins), kills it and
// wakes every operation in flight. It returns the recorded error.
func (e *execClient) fail(err error) error {
	err, first := e.end(err)
	if first {
		e.kill()
	}
	return err
}

// end records err as the driver's end and wakes every operation in
// flight, unless an end was recorded before: it returns the recorded
// error and whether it is err.
func (e *execClient) end(err error) (error, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err, false
	}
	e.err = err
	close(e.dead)
	return err, true
}

// quitGrace is how long a hung driver is given to print its threads'
// stacks after SIGQUIT before it is killed.
const quitGrace = time.Second

// hung fails the driver with err, first asking it with SIGQUIT for its
// threads' stacks (a Python driver's faulthandler, a Go or JVM program's
// own dump), which go to its log: what it was stuck in is the first
// thing a hang's reader needs.
func (e *execClient) hung(err error) error {
	if e.log != nil {
		err = fmt.Errorf("%w; its stderr, with its threads' stacks at the hang, is in %s", err, e.log.path)
	}
	err, first := e.end(err)
	if !first {
		return err
	}
	if e.cmd != nil && e.cmd.Process != nil {
		syscall.Kill(-e.cmd.Process.Pid, syscall.SIGQUIT)
		t := time.NewTimer(quitGrace)
		select {
		case <-e.exited:
		case <-t.C:
		}
		t.Stop()
	}
	e.kill()
	return err
}

func (e *execClient) kill() {
	if e.cmd != nil && e.cmd.Process != nil {
		syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (e *execClient) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	e.wmu.Lock()
	_, err = e.stdin.Write(append(b, '\n'))
	e.wmu.Unlock()
	if err == nil {
		return nil
	}
	// A driver that exited breaks the pipe before the reader has recorded
	// why (its exit status, its stderr): that reason, when it comes within
	// the grace, is the one to report.
	t := time.NewTimer(e.grace)
	defer t.Stop()
	select {
	case <-e.dead:
		return e.failed()
	case <-t.C:
	}
	return e.fail(fmt.Errorf("%w: %s: write to its input: %v", ErrDriver, e.argv(), err))
}

// failed is the recorded reason of the driver's end.
func (e *execClient) failed() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// call sends op and waits for its completion, at most its timeout and the
// hang grace; the run's end does not cut the wait short (the operation
// may still complete). An error means the driver is gone.
func (e *execClient) call(op execOp, timeout time.Duration) (execDone, error) {
	e.mu.Lock()
	if e.err != nil {
		err := e.err
		e.mu.Unlock()
		return execDone{}, err
	}
	if e.busy[op.Process] {
		e.mu.Unlock()
		return execDone{}, fmt.Errorf("process %d already has an operation in flight", op.Process)
	}
	e.nextID++
	op.ID = e.nextID
	p := &execPending{process: op.Process, done: make(chan execDone, 1)}
	e.pending[op.ID] = p
	e.busy[op.Process] = true
	e.mu.Unlock()
	op.TimeNs, op.TimeoutMs = time.Now().UnixNano(), timeout.Milliseconds()
	if err := e.write(op); err != nil {
		return execDone{}, err
	}
	t := time.NewTimer(timeout + e.grace)
	defer t.Stop()
	select {
	case d := <-p.done:
		return d, nil
	case <-e.dead:
		return execDone{}, e.err
	case <-t.C:
		return execDone{}, e.hung(fmt.Errorf("%w: %s hangs: no completion of operation %d (%s of process %d) within %s",
			ErrDriver, e.who(), op.ID, op.F, op.Process, timeout+e.grace))
	}
}

// open starts the driver, asking for features, and opens op's process.
func (e *execClient) open(ctx context.Context, op execOp, features ...string) error {
	if err := e.start(ctx, features...); err != nil {
		return err
	}
	d, err := e.call(op, e.cfg.DeliveryTimeout)
	if err != nil {
		return err
	}
	if d.Type != "ok" {
		return fmt.Errorf("client %s (%s): %s: %s", e.Name(), e.argv(), op.F, d.Error)
	}
	return nil
}

func (e *execClient) Producer(ctx context.Context, proc, _ int) (workloads.Producer, error) {
	if err := e.open(ctx, execOp{Process: proc, F: "open-producer"}); err != nil {
		return nil, err
	}
	return &execProcess{e: e, proc: proc}, nil
}

func (e *execClient) Consumer(ctx context.Context, proc int, parts []int32) (workloads.Consumer, error) {
	if err := e.open(ctx, execOp{Process: proc, F: "open-consumer", Partitions: parts}); err != nil {
		return nil, err
	}
	return &execProcess{e: e, proc: proc}, nil
}

// Close ends the driver: its input closes, and it is killed if it has not
// exited within the grace.
func (e *execClient) Close() error {
	e.mu.Lock()
	e.closing = true
	started := e.cmd != nil
	e.mu.Unlock()
	if e.cleanup != nil {
		defer e.cleanup()
	}
	if !started {
		return nil
	}
	e.wmu.Lock()
	e.stdin.Close()
	e.wmu.Unlock()
	t := time.NewTimer(e.grace)
	defer t.Stop()
	select {
	case <-e.exited:
	case <-t.C:
		e.kill()
		<-e.exited
	}
	return nil
}

// execProcess is one producer or consumer process of the driver.
type execProcess struct {
	e    *execClient
	proc int
}

func (p *execProcess) Send(_ context.Context, r workloads.Record) (workloads.Sent, error) {
	part := r.Partition
	d, err := p.e.call(execOp{Process: p.proc, F: "send", Partition: &part, Key: r.Key, Value: strconv.FormatInt(r.Value, 10)}, p.e.cfg.DeliveryTimeout)
	if err != nil {
		return workloads.Sent{Type: history.Info, Offset: -1, Error: err.Error()}, err
	}
	t, _ := history.ParseType(d.Type)
	s := workloads.Sent{Type: t, Offset: -1, Error: d.Error}
	if t == history.OK && d.Offset != nil {
		s.Offset = *d.Offset
	}
	return s, nil
}

func (p *execProcess) Poll(_ context.Context, timeout time.Duration) (workloads.Polled, error) {
	d, err := p.e.call(execOp{Process: p.proc, F: "poll"}, timeout)
	if err != nil {
		return workloads.Polled{Type: history.Info, Error: err.Error()}, err
	}
	return polledOf(d), nil
}

// polledOf is a poll's completion as the workload takes it.
func polledOf(d execDone) workloads.Polled {
	var reads workloads.Reads
	for _, r := range d.Records {
		reads.Add(r.Partition, r.Offset, []byte(r.Value))
	}
	t, _ := history.ParseType(d.Type)
	return workloads.Polled{Type: t, Reads: reads.Records(), Error: d.Error}
}

func (p *execProcess) Close() error {
	_, err := p.e.call(execOp{Process: p.proc, F: "close"}, p.e.cfg.RequestTimeout)
	return err
}

// tail keeps the last max bytes written to it; last hides secret in
// them.
type tail struct {
	mu     sync.Mutex
	max    int
	b      []byte
	cut    bool // the first bytes written were dropped
	secret string
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b, t.cut = t.b[len(t.b)-t.max:], true
	}
	return len(p), nil
}

// last is the tail as an error's ending ("" when nothing was written).
func (t *tail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(t.b)
	if t.secret != "" {
		s = redactSecret(s, t.secret)
		// What the cut kept of a password written across it.
		for i := 1; t.cut && i < len(t.secret); i++ {
			if strings.HasPrefix(s, t.secret[i:]) {
				s = "[hidden]" + s[len(t.secret)-i:]
				break
			}
		}
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	return "; its stderr ends:\n" + s
}

// redactedLog writes a driver's stderr to a file, whole lines at a
// time, with the hello's password replaced by [hidden] (a line is the
// unit the password cannot be cut across). Close does nothing on a nil
// log.
type redactedLog struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	line   []byte // the start of a line not yet ended
	secret string
	err    error
}

func createLog(path, secret string) (*redactedLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &redactedLog{path: path, f: f, secret: secret}, nil
}

// Write never fails: a log that cannot be written must not stop the
// driver (its first write error is kept for Close).
func (l *redactedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.line = append(l.line, p...)
	if i := bytes.LastIndexByte(l.line, '\n'); i >= 0 {
		l.flush(l.line[:i+1])
		l.line = append(l.line[:0], l.line[i+1:]...)
	}
	if len(l.line) > maxLogLine {
		// A line without end: written redacted but for its last bytes,
		// where a password could begin that a later write ends.
		s := redactSecret(string(l.line), l.secret)
		cut := len(s) - max(len(l.secret)-1, 0)
		l.flush([]byte(s[:cut]))
		l.line = append(l.line[:0], s[cut:]...)
	}
	return len(p), nil
}

// maxLogLine is how much of a line without end a driver's log holds
// back.
const maxLogLine = 64 << 10

func (l *redactedLog) flush(b []byte) {
	if l.f == nil || l.err != nil || len(b) == 0 {
		return
	}
	_, l.err = l.f.WriteString(redactSecret(string(b), l.secret))
}

// Close writes what is left and closes the file.
func (l *redactedLog) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return l.err
	}
	l.flush(l.line)
	l.line = nil
	if err := l.f.Close(); l.err == nil {
		l.err = err
	}
	l.f = nil
	return l.err
}

// clip is b as an error quotes it: cut, and without the hello's password.
func (e *execClient) clip(b []byte) string {
	return clip([]byte(e.redact(string(b))))
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}
