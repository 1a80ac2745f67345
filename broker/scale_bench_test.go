package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/internal/proctest"
)

// scalePartitionsPerTopic shapes the scale benchmarks' clusters: many
// topics of a few partitions each, as real clusters have them.
const scalePartitionsPerTopic = 10

// BenchmarkScale measures what a cluster's partition count costs: 3
// brokers and 1 coordinator, each a process, topics of 10 partitions at
// replication factor 3 (1,000 or 10,000 partitions in all, every broker a
// replica of each). One iteration is one cluster through these steps, each
// reported as its own metric:
//
//   - create_s: CreateTopics for every topic until every broker's metadata
//     has every partition with a leader.
//   - rss_MiB, heap_MiB: the brokers' mean resident set and Go heap in use
//     afterwards (idle, no records).
//   - meta_all_ms, meta_one_ms: a Metadata request (v9) for all topics, and
//     for one topic, answered by a broker (round trip on loopback, the
//     client's decoding included).
//   - brokerfo_ms: broker failover without the session timeout: from the
//     controller seeing the broker's registration gone to the last survivor
//     having applied the resulting LeaderAndIsr and UpdateMetadata.
//   - ctrlfo_ms: controller failover without the session timeout: from the
//     new controller's election to the last survivor having applied the
//     LeaderAndIsr and UpdateMetadata of its failover sequence (a third of
//     the partitions need a new leader: the old controller led them).
//   - start_s: every broker stopped, then started again, until every
//     broker's metadata has every partition with a leader.
//
// The time points come from the processes' own logs (one clock, the same
// machine). 10,000 partitions take minutes per iteration:
//
//	go test ./broker -run '^$' -bench Scale -benchtime 1x -count 3 -timeout 60m
func BenchmarkScale(b *testing.B) {
	for _, parts := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			var sum scaleResult
			for i := 0; i < b.N; i++ {
				r := measureScale(b, parts)
				sum.add(r)
			}
			n := float64(b.N)
			b.ReportMetric(sum.create.Seconds()/n, "create_s")
			b.ReportMetric(sum.rss/n/(1<<20), "rss_MiB")
			b.ReportMetric(sum.heap/n/(1<<20), "heap_MiB")
			b.ReportMetric(ms(sum.metaAll)/n, "meta_all_ms")
			b.ReportMetric(ms(sum.metaOne)/n, "meta_one_ms")
			b.ReportMetric(ms(sum.brokerFO)/n, "brokerfo_ms")
			b.ReportMetric(ms(sum.ctrlFO)/n, "ctrlfo_ms")
			b.ReportMetric(sum.start.Seconds()/n, "start_s")
		})
	}
}

type scaleResult struct {
	create, metaAll, metaOne, brokerFO, ctrlFO, start time.Duration
	rss, heap                                         float64
}

func (s *scaleResult) add(r scaleResult) {
	s.create += r.create
	s.metaAll += r.metaAll
	s.metaOne += r.metaOne
	s.brokerFO += r.brokerFO
	s.ctrlFO += r.ctrlFO
	s.start += r.start
	s.rss += r.rss
	s.heap += r.heap
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func measureScale(b *testing.B, parts int) scaleResult {
	b.StopTimer()
	defer b.StartTimer()
	raiseFileLimit(b, uint64(3*parts+2048))
	var r scaleResult
	// Each broker serves its heap profile on its own port.
	ports := proctest.FreePorts(b, 3)
	metricsAddr := map[int32]string{}
	perBroker := map[int32][]string{}
	for i, id := range []int32{1, 2, 3} {
		metricsAddr[id] = fmt.Sprintf("127.0.0.1:%d", ports[i])
		perBroker[id] = []string{"metrics.listen=" + metricsAddr[id]}
	}
	c := proctest.StartCluster(b, proctest.ClusterOptions{Brokers: 3, BrokerOverrides: perBroker, Overrides: []string{
		"coordinator.session.timeout.ms=6000",
		"replica.fetch.wait.max.ms=500",
		"log.segment.bytes=1048576",
		"log.index.size.max.bytes=65536",
	}})
	topics := parts / scalePartitionsPerTopic
	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("s%05d", i)
	}

	start := time.Now()
	cl := c.Client()
	adm := kadm.NewClient(cl)
	for i := 0; i < len(names); i += 100 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		res, err := adm.CreateTopics(ctx, scalePartitionsPerTopic, 3, nil, names[i:min(i+100, len(names))]...)
		cancel()
		if err != nil {
			b.Fatalf("create topics: %v", err)
		}
		for _, t := range res {
			if t.Err != nil {
				b.Fatalf("create topic %s: %v", t.Topic, t.Err)
			}
		}
	}
	cl.Close()
	waitOnline(b, c, parts, 0, 20*time.Minute)
	r.create = time.Since(start)

	for id := range c.Brokers {
		r.rss += float64(procRSS(b, c.Brokers[id].Pid())) / 3
		r.heap += float64(heapInuse(b, metricsAddr[id])) / 3
	}
	r.metaAll = metadataTime(b, c.BrokerAddrs[1], nil, 10)
	r.metaOne = metadataTime(b, c.BrokerAddrs[1], []string{names[len(names)/2]}, 200)

	// Broker failover: a broker other than the controller.
	ctrl := controllerID(b, c)
	victim := int32(1 + ctrl%3)
	mark := logMarks(c)
	c.Brokers[victim].Kill()
	waitOnline(b, c, parts, victim, 10*time.Minute)
	at := logTime(b, c.Brokers[ctrl], mark[ctrl], `msg="live brokers changed"`, "")
	r.brokerFO = lastApplied(b, c, mark, at, "").Sub(at)
	c.Brokers[victim].Restart()
	waitFullISR(b, c, parts, 20*time.Minute)

	// Controller failover.
	mark = logMarks(c)
	c.Brokers[ctrl].Kill()
	waitOnline(b, c, parts, ctrl, 10*time.Minute)
	var next int32 = -1
	proctest.Eventually(b, time.Minute, "a new controller", func() error {
		if next = controllerID(b, c); next < 0 || next == ctrl {
			return fmt.Errorf("controller %d", next)
		}
		return nil
	})
	line := logLine(b, c.Brokers[next], mark[next], `msg="elected controller"`)
	epoch := field(line, "controller_epoch")
	elected := lineTime(b, line)
	r.ctrlFO = lastApplied(b, c, mark, elected, epoch).Sub(elected)
	c.Brokers[ctrl].Restart()
	waitFullISR(b, c, parts, 20*time.Minute)

	// Cluster start.
	for _, p := range c.Brokers {
		if err := p.Stop(5 * time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	start = time.Now()
	for _, p := range c.Brokers {
		p.Restart()
	}
	waitOnline(b, c, parts, 0, 20*time.Minute)
	r.start = time.Since(start)
	b.Logf("partitions=%d: %+v", parts, r)
	return r
}

// allMetadata asks the broker at addr for every topic.
func allMetadata(addr string, topics []string) (*kmsg.MetadataResponse, error) {
	cl := wire.NewClient(addr, "bench", nil)
	defer cl.Close()
	return metadataOn(cl, topics)
}

func metadataOn(cl *wire.Client, topics []string) (*kmsg.MetadataResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(9)
	if topics != nil {
		for _, t := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = &t
			req.Topics = append(req.Topics, rt)
		}
	}
	raw, err := cl.Request(ctx, req)
	if err != nil {
		return nil, err
	}
	return raw.(*kmsg.MetadataResponse), nil
}

// metadataTime is the mean round trip of n Metadata requests on one
// connection.
func metadataTime(b *testing.B, addr string, topics []string, n int) time.Duration {
	cl := wire.NewClient(addr, "bench", nil)
	defer cl.Close()
	if _, err := metadataOn(cl, topics); err != nil { // connect
		b.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := metadataOn(cl, topics); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / time.Duration(n)
}

// waitOnline waits until every running broker's metadata has parts
// partitions, each led by a running broker other than gone.
func waitOnline(b *testing.B, c *proctest.Cluster, parts int, gone int32, within time.Duration) {
	b.Helper()
	waitMetadata(b, c, within, func(pm kmsg.MetadataResponseTopicPartition) error {
		if pm.Leader < 0 || pm.Leader == gone || !c.Brokers[pm.Leader].Running() {
			return fmt.Errorf("leader %d", pm.Leader)
		}
		return nil
	}, parts)
}

// waitFullISR waits until every running broker's metadata has parts
// partitions, each with a leader and three replicas in sync.
func waitFullISR(b *testing.B, c *proctest.Cluster, parts int, within time.Duration) {
	b.Helper()
	waitMetadata(b, c, within, func(pm kmsg.MetadataResponseTopicPartition) error {
		if pm.Leader < 0 || len(pm.ISR) != 3 {
			return fmt.Errorf("leader %d isr %v", pm.Leader, pm.ISR)
		}
		return nil
	}, parts)
}

func waitMetadata(b *testing.B, c *proctest.Cluster, within time.Duration, ok func(kmsg.MetadataResponseTopicPartition) error, parts int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	err := proctest.Until(ctx, func() error {
		for id, p := range c.Brokers {
			if !p.Running() {
				continue
			}
			resp, err := allMetadata(c.BrokerAddrs[id], nil)
			if err != nil {
				return fmt.Errorf("broker %d: %w", id, err)
			}
			n := 0
			for _, t := range resp.Topics {
				for _, pm := range t.Partitions {
					if err := ok(pm); err != nil {
						return fmt.Errorf("broker %d: %s-%d: %w", id, *t.Topic, pm.Partition, err)
					}
					n++
				}
			}
			if n != parts {
				return fmt.Errorf("broker %d: %d of %d partitions", id, n, parts)
			}
		}
		return nil
	})
	if err != nil {
		c.DumpLogs(20)
		b.Fatalf("after %v: %v", within, err)
	}
}

// logMarks is where each broker's log ends now.
func logMarks(c *proctest.Cluster) map[int32]int64 {
	out := map[int32]int64{}
	for id, p := range c.Brokers {
		if st, err := os.Stat(p.LogPath); err == nil {
			out[id] = st.Size()
		}
	}
	return out
}

// logLines returns the lines of p's log after byte offset from that
// contain every one of subs.
func logLines(b *testing.B, p *proctest.Proc, from int64, subs ...string) []string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		b.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
next:
	for sc.Scan() {
		for _, s := range subs {
			if s != "" && !strings.Contains(sc.Text(), s) {
				continue next
			}
		}
		out = append(out, sc.Text())
	}
	return out
}

// logLine is the last line after from with sub, waited for.
func logLine(b *testing.B, p *proctest.Proc, from int64, sub string) string {
	var line string
	proctest.Eventually(b, time.Minute, p.Name+" logs "+sub, func() error {
		ls := logLines(b, p, from, sub)
		if len(ls) == 0 {
			return fmt.Errorf("not yet")
		}
		line = ls[len(ls)-1]
		return nil
	})
	return line
}

func logTime(b *testing.B, p *proctest.Proc, from int64, subs ...string) time.Time {
	return lineTime(b, logLine(b, p, from, strings.Join(subs, "")))
}

var timeField = regexp.MustCompile(`^time=(\S+)`)

func lineTime(b *testing.B, line string) time.Time {
	m := timeField.FindStringSubmatch(line)
	if m == nil {
		b.Fatalf("no time in %q", line)
	}
	t, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		b.Fatalf("time in %q: %v", line, err)
	}
	return t
}

// field is key's value in a slog text line.
func field(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// lastApplied waits until every running broker has applied a LeaderAndIsr
// and an UpdateMetadata at or after since (from controller epoch epoch
// when not empty) and returns the latest of the first ones.
func lastApplied(b *testing.B, c *proctest.Cluster, mark map[int32]int64, since time.Time, epoch string) time.Time {
	var last time.Time
	for id, p := range c.Brokers {
		if !p.Running() {
			continue
		}
		for _, msg := range []string{`msg="applied LeaderAndIsr"`, `msg="applied UpdateMetadata"`} {
			proctest.Eventually(b, 5*time.Minute, fmt.Sprintf("broker %d: %s", id, msg), func() error {
				for _, l := range logLines(b, p, mark[id], msg) {
					if epoch != "" && field(l, "controller_epoch") != epoch {
						continue
					}
					if t := lineTime(b, l); !t.Before(since) {
						if t.After(last) {
							last = t
						}
						return nil
					}
				}
				return fmt.Errorf("not yet")
			})
		}
	}
	return last
}

// procRSS is a process's resident set size in bytes.
func procRSS(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

var heapInuseLine = regexp.MustCompile(`# HeapInuse = (\d+)`)

// heapInuse reads a broker's Go heap in use from its heap profile, after
// a garbage collection (gc=1).
func heapInuse(b *testing.B, addr string) int64 {
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	m := heapInuseLine.FindSubmatch(body)
	if m == nil {
		b.Fatalf("no HeapInuse in the heap profile of %s", addr)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// raiseFileLimit makes sure the brokers (children, inheriting the limit)
// may open n files: a replica holds three descriptors (its segment and two
// indexes), so 10,000 replicas on a broker need more than 30,000 (Kafka's
// documentation asks for 100,000 or more). Where the limit cannot be
// raised that size is skipped.
func raiseFileLimit(b *testing.B, n uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	want := syscall.Rlimit{Cur: n, Max: max(lim.Max, n)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		b.Skipf("needs %d open files per process (ulimit -n is %d, hard %d; raising it needs root): %v", n, lim.Cur, lim.Max, err)
	}
}
