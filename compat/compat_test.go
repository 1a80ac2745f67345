package compat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

var matrixOut = flag.String("matrix", "", "rewrite the client × capability table between the <!-- matrix --> markers of this markdown file")

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

// record is one Kafka record as the jobs and results carry it.
type record struct {
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Key       string   `json:"key"`
	Value     string   `json:"value"`
	Headers   []header `json:"headers,omitempty"`
}

type header struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func (r record) String() string {
	return fmt.Sprintf("p%d@%d %s=%s %v", r.Partition, r.Offset, r.Key, r.Value, r.Headers)
}

// job is what a client is asked to do for one capability. Every client
// gets the same job, so the checks are the same for all.
type job struct {
	Capability string   `json:"capability"`
	Bootstrap  []string `json:"bootstrap"`
	Topic      string   `json:"topic"`
	Partitions int32    `json:"partitions"`
	Group      string   `json:"group,omitempty"`
	// Records: produce sends them (to their Partition); consume and
	// groups expect them in the topic at the start.
	Records []record `json:"records,omitempty"`
	// After: groups produces them once the second member has its share.
	After []record `json:"after,omitempty"`
	// Commit: offsets commits these for Group.
	Commit map[int32]int64 `json:"commit,omitempty"`
	// admin: CreateTopic is created with Partitions and Configs, grown to
	// GrowTo partitions; DeleteTopic is deleted; Group is a live group of
	// one member; Topic holds Records (for the list-offsets answers).
	CreateTopic string            `json:"create_topic,omitempty"`
	Configs     map[string]string `json:"configs,omitempty"`
	GrowTo      int32             `json:"grow_to,omitempty"`
	DeleteTopic string            `json:"delete_topic,omitempty"`
	// TLS, when set, has the client connect over TLS (TestMutualTLS);
	// without it, in plaintext.
	TLS *jobTLS `json:"tls,omitempty"`
}

// jobTLS is a job's TLS: the client trusts the CAs of the PEM file CA
// and, when Cert is set, offers the certificate in Cert with the key in
// Key (mutual TLS).
type jobTLS struct {
	CA   string `json:"ca"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

// tlsConfig is j.TLS for the Go clients, nil when the job is plaintext.
// ServerName stays empty: each client checks the host it dials.
func (j job) tlsConfig() (*tls.Config, error) {
	if j.TLS == nil {
		return nil, nil
	}
	ca, err := os.ReadFile(j.TLS.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no certificate in %s", j.TLS.CA)
	}
	tc := &tls.Config{RootCAs: pool}
	if j.TLS.Cert != "" {
		c, err := tls.LoadX509KeyPair(j.TLS.Cert, j.TLS.Key)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// result is what a client reports. Fields a capability does not use stay
// empty. NotOffered names the parts of the job the client has no API for
// (feature -> why); the matrix shows them.
type result struct {
	// produce
	Acks       []ack `json:"acks,omitempty"`
	Idempotent bool  `json:"idempotent"`
	// consume
	Records []record `json:"records,omitempty"`
	// groups: First is what the only member read; after the second joined,
	// AssignA/AssignB are the split and A/B what each read of job.After.
	First   []record `json:"first,omitempty"`
	AssignA []int32  `json:"assign_a,omitempty"`
	AssignB []int32  `json:"assign_b,omitempty"`
	A       []record `json:"a,omitempty"`
	B       []record `json:"b,omitempty"`
	// offsets: the committed offsets read back by a fresh client.
	Committed map[int32]int64 `json:"committed,omitempty"`
	// admin
	Configs    map[string]string `json:"configs,omitempty"`
	Partitions int32             `json:"partitions,omitempty"`
	Groups     []string          `json:"groups,omitempty"`
	GroupState string            `json:"group_state,omitempty"`
	GroupType  string            `json:"group_protocol_type,omitempty"`
	Members    int               `json:"members,omitempty"`
	Earliest   map[int32]int64   `json:"earliest,omitempty"`
	Latest     map[int32]int64   `json:"latest,omitempty"`
	NotOffered map[string]string `json:"not_offered,omitempty"`
	// Gaps: parts the client offers but cannot do, for a reason that is
	// the client's and would be the same against Kafka.
	Gaps        map[string]string `json:"gaps,omitempty"`
	Unsupported string            `json:"unsupported,omitempty"` // the whole capability is not offered
}

type ack struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// runner does one job with a client.
type runner func(ctx context.Context, t *testing.T, j job) (result, error)

// client is one row of the matrix.
type client struct {
	name string
	// missing says what is not installed, or "" when the client can run.
	missing func() string
	run     runner
}

var capabilities = []string{"produce", "consume", "groups", "offsets", "admin"}

// cells collects each subtest's outcome for -matrix.
var cells = struct {
	sync.Mutex
	m map[string]map[string]string
}{m: map[string]map[string]string{}}

func setCell(row, capability, s string) {
	cells.Lock()
	defer cells.Unlock()
	if cells.m[row] == nil {
		cells.m[row] = map[string]string{}
	}
	cells.m[row][capability] = s
}

// overrides make groups rebalance without Kafka's 3 s initial delay and
// keep __consumer_offsets small; nothing else differs from the defaults.
var overrides = []string{
	"group.initial.rebalance.delay.ms=0",
	"offsets.topic.num.partitions=3",
	"group.min.session.timeout.ms=1000",
}

// TestClients runs every client of the matrix through every capability
// against one 3-broker cluster. A client that is not installed skips
// saying what is missing; one that is installed and fails fails.
func TestClients(t *testing.T) {
	cl := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: overrides})
	for _, c := range clients() {
		t.Run(c.name, func(t *testing.T) {
			if m := c.missing(); m != "" {
				for _, capability := range capabilities {
					setCell(c.name, capability, "missing: "+m)
				}
				t.Skipf("%s is not installed (scripts/deps.sh installs it): %s", c.name, m)
			}
			for _, capability := range capabilities {
				t.Run(capability, func(t *testing.T) {
					status := "FAIL"
					defer func() { setCell(c.name, capability, status) }()
					notes := checks[capability](t, cl, c, name(c.name, capability))
					if t.Failed() {
						return
					}
					status = "pass"
					if notes != "" {
						status = notes
						if !strings.HasPrefix(notes, "not offered") {
							status = "pass; " + notes
						}
					}
				})
			}
		})
	}
	if *matrixOut != "" {
		if err := writeMatrix(*matrixOut); err != nil {
			t.Fatal(err)
		}
	}
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9._-]`)

func name(row, capability string) string {
	return unsafeName.ReplaceAllString(row+"-"+capability, "_")
}

// writeMatrix replaces what lies between the markers in path with the
// table of this run.
func writeMatrix(path string) error {
	const begin, end = "<!-- matrix -->\n", "<!-- /matrix -->"
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("matrix: %w", err)
	}
	s := string(doc)
	i, k := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || k < i {
		return fmt.Errorf("matrix: %s has no %q ... %q markers", path, strings.TrimSpace(begin), end)
	}
	s = s[:i+len(begin)] + matrixTable() + s[k:]
	return os.WriteFile(path, []byte(s), 0o644)
}

func matrixTable() string {
	cells.Lock()
	defer cells.Unlock()
	var b strings.Builder
	b.WriteString("| client | " + strings.Join(capabilities, " | ") + " |\n|---|")
	b.WriteString(strings.Repeat("---|", len(capabilities)) + "\n")
	for _, c := range clients() {
		row, ok := cells.m[c.name]
		if !ok {
			continue
		}
		b.WriteString("| " + c.name)
		for _, capability := range capabilities {
			s := row[capability]
			if s == "" {
				s = "not run"
			}
			b.WriteString(" | " + strings.ReplaceAll(s, "|", "/"))
		}
		b.WriteString(" |\n")
	}
	return b.String()
}

// untilKnown retries call while it fails because the answering broker
// does not know a topic created a moment ago: in Kafka as in isrlab,
// brokers other than the one that answered the creation learn of the topic
// from the controller shortly after.
func untilKnown(ctx context.Context, unknown func(error) bool, call func() error) error {
	for {
		err := call()
		if err == nil || !unknown(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (still unknown: %v)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// notOffered renders a result's NotOffered for the matrix.
func notOffered(r result) string {
	var parts []string
	for f, why := range r.NotOffered {
		parts = append(parts, fmt.Sprintf("%s not offered (%s)", f, why))
	}
	for f, why := range r.Gaps {
		parts = append(parts, fmt.Sprintf("%s: known gap (%s)", f, why))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// check runs one capability's job with c and verifies the outcome against
// the cluster; it returns the matrix notes.
type check func(t *testing.T, cl *proctest.Cluster, c client, name string) string

var checks = map[string]check{
	"produce": checkProduce,
	"consume": checkConsume,
	"groups":  checkGroups,
	"offsets": checkOffsets,
	"admin":   checkAdmin,
}

const jobTimeout = 90 * time.Second

func runJob(t *testing.T, c client, j job) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	r, err := c.run(ctx, t, j)
	if err != nil {
		t.Fatalf("%s %s: %v", c.name, j.Capability, err)
	}
	return r
}

// makeRecords returns n records spread over partitions, keyed and with
// two headers each.
func makeRecords(prefix string, n int, partitions int32) []record {
	out := make([]record, n)
	for i := range out {
		out[i] = record{Partition: int32(i) % partitions, Key: fmt.Sprintf("%sk%d", prefix, i), Value: fmt.Sprintf("%sv%d", prefix, i),
			Headers: []header{{"n", fmt.Sprint(i)}, {"src", prefix}}}
	}
	return out
}

// seed produces recs with kgo (acks=all) and fills in their offsets.
func seed(t *testing.T, cl *proctest.Cluster, topic string, recs []record) {
	t.Helper()
	// Uncompressed: whether a client has every codec is not what these
	// tests ask.
	kc := cl.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var krs []*kgo.Record
	for _, r := range recs {
		kr := &kgo.Record{Topic: topic, Partition: r.Partition, Key: []byte(r.Key), Value: []byte(r.Value)}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
		}
		krs = append(krs, kr)
	}
	if err := kc.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		t.Fatalf("seed %s: %v", topic, err)
	}
	for i, kr := range krs {
		recs[i].Offset = kr.Offset
	}
}

// readAll reads every record of topic with kgo, sorted by partition and
// offset, with the producer id each batch carried.
func readAll(t *testing.T, cl *proctest.Cluster, topic string, n int) ([]record, []int64) {
	t.Helper()
	kc := cl.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []record
	pids := map[string]int64{}
	for len(out) < n {
		fs := kc.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: %d of %d records", topic, len(out), n)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("read %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(kr *kgo.Record) {
			r := record{Partition: kr.Partition, Offset: kr.Offset, Key: string(kr.Key), Value: string(kr.Value)}
			for _, h := range kr.Headers {
				r.Headers = append(r.Headers, header{h.Key, string(h.Value)})
			}
			out = append(out, r)
			pids[r.Key] = kr.ProducerID
		})
	}
	sortRecords(out)
	var ps []int64
	for _, r := range out {
		ps = append(ps, pids[r.Key])
	}
	return out, ps
}

func sortRecords(rs []record) {
	slices.SortFunc(rs, func(a, b record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
}

// sameRecords compares two record lists in partition/offset order;
// headers are compared when withHeaders.
func sameRecords(t *testing.T, what string, got, want []record, withHeaders bool) {
	t.Helper()
	got, want = slices.Clone(got), slices.Clone(want)
	sortRecords(got)
	sortRecords(want)
	if !withHeaders {
		for i := range got {
			got[i].Headers = nil
		}
		for i := range want {
			want[i].Headers = nil
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d\ngot:  %v\nwant: %v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i].String() != want[i].String() {
			t.Fatalf("%s: record %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

func createTopic(t *testing.T, cl *proctest.Cluster, topic string, partitions int32) {
	t.Helper()
	cl.CreateTopic(topic, partitions, 3, nil)
}

func checkProduce(t *testing.T, cl *proctest.Cluster, c client, topic string) string {
	createTopic(t, cl, topic, 3)
	recs := makeRecords("p", 30, 3)
	r := runJob(t, c, job{Capability: "produce", Bootstrap: cl.Bootstrap(), Topic: topic, Partitions: 3, Records: recs})
	_, noHeaders := r.NotOffered["headers"]
	got, pids := readAll(t, cl, topic, len(recs))
	// Each partition holds its records in the order they were sent.
	for i := range recs {
		recs[i].Offset = int64(i / 3)
	}
	if r.Acks != nil {
		if len(r.Acks) != len(recs) {
			t.Fatalf("%d acks for %d records", len(r.Acks), len(recs))
		}
		for i, a := range r.Acks {
			if a.Partition != recs[i].Partition || a.Offset != recs[i].Offset {
				t.Fatalf("record %d acknowledged at %d@%d, stored at %d@%d", i, a.Partition, a.Offset, recs[i].Partition, recs[i].Offset)
			}
		}
	}
	sameRecords(t, "stored records", got, recs, !noHeaders)
	for i, pid := range pids {
		if r.Idempotent && pid < 0 {
			t.Fatalf("idempotent producer, but %v was stored without a producer id", got[i])
		}
		if !r.Idempotent && pid >= 0 {
			t.Fatalf("non-idempotent producer, but %v carries producer id %d", got[i], pid)
		}
	}
	if _, ok := r.NotOffered["idempotence"]; !ok && !r.Idempotent {
		t.Fatalf("the client did not say idempotence is not offered, yet produced without it")
	}
	if r.Acks == nil {
		if _, ok := r.NotOffered["acks"]; !ok {
			t.Fatalf("no acknowledged offsets reported")
		}
	}
	return notOffered(r)
}

func checkConsume(t *testing.T, cl *proctest.Cluster, c client, topic string) string {
	createTopic(t, cl, topic, 3)
	recs := makeRecords("c", 30, 3)
	seed(t, cl, topic, recs)
	r := runJob(t, c, job{Capability: "consume", Bootstrap: cl.Bootstrap(), Topic: topic, Partitions: 3, Records: recs})
	_, noHeaders := r.NotOffered["headers"]
	sameRecords(t, "consumed records", r.Records, recs, !noHeaders)
	return notOffered(r)
}

func checkGroups(t *testing.T, cl *proctest.Cluster, c client, topic string) string {
	const partitions = 4
	createTopic(t, cl, topic, partitions)
	first := makeRecords("g", 12, partitions)
	seed(t, cl, topic, first)
	after := makeRecords("h", 12, partitions)
	r := runJob(t, c, job{Capability: "groups", Bootstrap: cl.Bootstrap(), Topic: topic, Partitions: partitions, Group: topic, Records: first, After: after})
	_, noHeaders := r.NotOffered["headers"]
	sameRecords(t, "the only member's records", r.First, first, !noHeaders)
	a, b := slices.Sorted(slices.Values(r.AssignA)), slices.Sorted(slices.Values(r.AssignB))
	if len(a) == 0 || len(b) == 0 {
		t.Fatalf("after the second member joined: assigned %v and %v, want both a share", a, b)
	}
	all := slices.Sorted(slices.Values(append(slices.Clone(a), b...)))
	if !slices.Equal(all, []int32{0, 1, 2, 3}) {
		t.Fatalf("assignments %v and %v do not split partitions 0-3", a, b)
	}
	for _, x := range r.A {
		if !slices.Contains(a, x.Partition) {
			t.Fatalf("member A read %v from a partition it does not own (%v)", x, a)
		}
	}
	for _, x := range r.B {
		if !slices.Contains(b, x.Partition) {
			t.Fatalf("member B read %v from a partition it does not own (%v)", x, b)
		}
	}
	stored, _ := readAll(t, cl, topic, len(first)+len(after))
	var wantAfter []record
	for _, s := range stored {
		if strings.HasPrefix(s.Key, "h") {
			wantAfter = append(wantAfter, s)
		}
	}
	sameRecords(t, "both members' records after the rebalance", append(slices.Clone(r.A), r.B...), wantAfter, !noHeaders)
	// Both members committed what they read: the group's offsets are
	// the partitions' ends.
	kc := cl.Client()
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	proctest.Eventually(t, 20*time.Second, "the group's committed offsets at the end of every partition", func() error {
		offs, err := kadm.NewClient(kc).FetchOffsets(ctx, topic)
		if err != nil {
			return err
		}
		for p := int32(0); p < partitions; p++ {
			o, ok := offs.Lookup(topic, p)
			if !ok || o.At != 6 {
				return fmt.Errorf("partition %d committed at %+v, want 6", p, o)
			}
		}
		return nil
	})
	return notOffered(r)
}

func checkOffsets(t *testing.T, cl *proctest.Cluster, c client, topic string) string {
	createTopic(t, cl, topic, 3)
	seed(t, cl, topic, makeRecords("o", 30, 3))
	commit := map[int32]int64{0: 3, 1: 7, 2: 10}
	r := runJob(t, c, job{Capability: "offsets", Bootstrap: cl.Bootstrap(), Topic: topic, Partitions: 3, Group: topic, Commit: commit})
	if r.Unsupported != "" {
		return "not offered: " + r.Unsupported
	}
	if !mapsEqual(r.Committed, commit) {
		t.Fatalf("committed offsets read back by the client: %v, want %v", r.Committed, commit)
	}
	kc := cl.Client()
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(kc).FetchOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range commit {
		if o, ok := offs.Lookup(topic, p); !ok || o.At != want {
			t.Fatalf("kadm reads partition %d committed at %+v, want %d", p, o, want)
		}
	}
	return notOffered(r)
}

func mapsEqual(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func checkAdmin(t *testing.T, cl *proctest.Cluster, c client, topic string) string {
	createTopic(t, cl, topic, 3)
	recs := makeRecords("a", 9, 3)
	recs = append(recs, makeRecords("b", 3, 1)...)
	seed(t, cl, topic, recs)
	created, deleted, group := topic+"-new", topic+"-del", topic+"-live"
	createTopic(t, cl, deleted, 1)
	// A live group of one kgo member, for list and describe groups.
	member := cl.Client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer member.Close()
	pollCtx, stopPoll := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pollCtx.Err() == nil {
			member.PollFetches(pollCtx)
		}
	}()
	defer func() { stopPoll(); <-done }()
	kc := cl.Client()
	defer kc.Close()
	adm := kadm.NewClient(kc)
	proctest.Eventually(t, 30*time.Second, "group "+group+" stable", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		dg, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return err
		}
		if g := dg[group]; g.State != "Stable" {
			return fmt.Errorf("state %q", g.State)
		}
		return nil
	})

	configs := map[string]string{"retention.ms": "123456789", "cleanup.policy": "delete"}
	r := runJob(t, c, job{Capability: "admin", Bootstrap: cl.Bootstrap(), Topic: topic, Partitions: 3, Group: group,
		CreateTopic: created, Configs: configs, GrowTo: 5, DeleteTopic: deleted})
	off := func(what string) bool {
		_, ok := r.NotOffered[what]
		_, gap := r.Gaps[what]
		return ok || gap
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !off("create_topics") {
		want := int32(3)
		if !off("create_partitions") {
			want = 5
		}
		proctest.Eventually(t, 30*time.Second, fmt.Sprintf("topic %s with %d partitions of 3 replicas", created, want), func() error {
			td, err := adm.ListTopics(ctx, created)
			if err != nil {
				return err
			}
			d := td[created]
			if d.Err != nil {
				return d.Err
			}
			if len(d.Partitions) != int(want) {
				return fmt.Errorf("%d partitions", len(d.Partitions))
			}
			for _, p := range d.Partitions {
				if len(p.Replicas) != 3 {
					return fmt.Errorf("partition %d replicas %v", p.Partition, p.Replicas)
				}
			}
			return nil
		})
		rc, err := adm.DescribeTopicConfigs(ctx, created)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range configs {
			got, err := rc.On(created, nil)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, cfg := range got.Configs {
				if cfg.Key == k && cfg.MaybeValue() == v {
					found = true
				}
			}
			if !found {
				t.Fatalf("topic %s created without %s=%s", created, k, v)
			}
		}
		if !off("create_partitions") && r.Partitions != 5 {
			t.Fatalf("the client sees %d partitions of %s, want 5", r.Partitions, created)
		}
	}
	if !off("describe_configs") {
		for k, v := range configs {
			if r.Configs[k] != v {
				t.Fatalf("described configs of %s: %s=%q, want %q (all: %v)", created, k, r.Configs[k], v, r.Configs)
			}
		}
	}
	if !off("list_groups") && !slices.Contains(r.Groups, group) {
		t.Fatalf("listed groups %v, want %s among them", r.Groups, group)
	}
	if !off("describe_groups") {
		if r.GroupState != "Stable" || r.Members != 1 || r.GroupType != "consumer" {
			t.Fatalf("described %s: state %q, %d members, protocol type %q; want Stable, 1, consumer", group, r.GroupState, r.Members, r.GroupType)
		}
	}
	if !off("list_offsets") {
		wantEarliest := map[int32]int64{0: 0, 1: 0, 2: 0}
		wantLatest := map[int32]int64{0: 6, 1: 3, 2: 3}
		if !mapsEqual(r.Earliest, wantEarliest) || !mapsEqual(r.Latest, wantLatest) {
			t.Fatalf("listed offsets earliest %v latest %v, want %v %v", r.Earliest, r.Latest, wantEarliest, wantLatest)
		}
	}
	if !off("delete_topics") {
		proctest.Eventually(t, 30*time.Second, "topic "+deleted+" gone", func() error {
			td, err := adm.ListTopics(ctx)
			if err != nil {
				return err
			}
			if td.Has(deleted) {
				return fmt.Errorf("still listed")
			}
			return nil
		})
	}
	return notOffered(r)
}
