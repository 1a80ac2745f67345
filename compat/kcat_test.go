package compat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kcat is the librdkafka row through the kcat command line: it produces
// (acks=all, idempotent, a header set per message), consumes, and joins
// groups; it has no admin calls beyond metadata and offsets for times.
func kcat() client {
	return client{name: "kcat", missing: func() string {
		if _, err := exec.LookPath("kcat"); err != nil {
			return "kcat (Debian package kcat)"
		}
		return ""
	}, run: runKcat}
}

func kcatArgs(j job, more ...string) []string {
	args := []string{"-b", strings.Join(j.Bootstrap, ","), "-t", j.Topic}
	if j.TLS != nil {
		args = append(args, "-X", "security.protocol=SSL", "-X", "ssl.ca.location="+j.TLS.CA)
		if j.TLS.Cert != "" {
			args = append(args, "-X", "ssl.certificate.location="+j.TLS.Cert, "-X", "ssl.key.location="+j.TLS.Key)
		}
	}
	return append(args, more...)
}

func runKcatCmd(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "kcat", args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kcat %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.Bytes(), nil
}

// kcatMessage is one line of kcat -J.
type kcatMessage struct {
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Key       *string  `json:"key"`
	Payload   *string  `json:"payload"`
	Headers   []string `json:"headers"` // name, value, name, value...
}

func (m kcatMessage) record() record {
	r := record{Partition: m.Partition, Offset: m.Offset}
	if m.Key != nil {
		r.Key = *m.Key
	}
	if m.Payload != nil {
		r.Value = *m.Payload
	}
	for i := 0; i+1 < len(m.Headers); i += 2 {
		r.Headers = append(r.Headers, header{m.Headers[i], m.Headers[i+1]})
	}
	return r
}

func runKcat(ctx context.Context, t *testing.T, j job) (result, error) {
	var r result
	switch j.Capability {
	case "produce":
		r.Idempotent = true
		r.NotOffered = map[string]string{"acks": "kcat -P does not print the offsets it was acknowledged at"}
		// One kcat per record: kcat's -H applies to every message of a run.
		for _, rec := range j.Records {
			args := kcatArgs(j, "-P", "-p", strconv.Itoa(int(rec.Partition)), "-K", "\t",
				"-X", "acks=all", "-X", "enable.idempotence=true")
			for _, h := range rec.Headers {
				args = append(args, "-H", h.Key+"="+h.Value)
			}
			if _, err := runKcatCmd(ctx, rec.Key+"\t"+rec.Value+"\n", args...); err != nil {
				return r, err
			}
		}
		return r, nil
	case "consume":
		out, err := runKcatCmd(ctx, "", kcatArgs(j, "-C", "-o", "beginning", "-e", "-J", "-q")...)
		if err != nil {
			return r, err
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var m kcatMessage
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				return r, fmt.Errorf("kcat -J line %q: %w", line, err)
			}
			r.Records = append(r.Records, m.record())
		}
		return r, nil
	case "groups":
		prod, err := kgo.NewClient(kgo.SeedBrokers(j.Bootstrap...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			return r, err
		}
		defer prod.Close()
		started := 0
		gr, err := runGroup(ctx, j, func(ctx context.Context) (member, error) {
			// kcat commits only automatically (every 100 ms here): the
			// second member joins once the first one's commits are in, so
			// nothing is delivered twice.
			if started++; started > 1 {
				if err := waitCommitted(ctx, prod, j); err != nil {
					return nil, err
				}
			}
			return startKcatMember(ctx, j)
		}, func(ctx context.Context, recs []record) error {
			var krs []*kgo.Record
			for _, rec := range recs {
				krs = append(krs, toKgo(j.Topic, rec))
			}
			return prod.ProduceSync(ctx, krs...).FirstErr()
		})
		return gr, err
	case "offsets":
		r.Unsupported = "kcat has no call to commit or read a group's offsets"
		return r, nil
	case "admin":
		r.NotOffered = map[string]string{}
		for _, call := range []string{"create_topics", "describe_configs", "create_partitions", "list_groups", "describe_groups", "delete_topics"} {
			r.NotOffered[call] = "kcat has no admin calls"
		}
		// List offsets: -Q asks for the offset of a timestamp; -2 and -1
		// are Kafka's earliest and latest.
		r.Earliest, r.Latest = map[int32]int64{}, map[int32]int64{}
		for _, which := range []struct {
			ts  string
			out map[int32]int64
		}{{"-2", r.Earliest}, {"-1", r.Latest}} {
			args := []string{"-b", strings.Join(j.Bootstrap, ","), "-Q", "-J"}
			for p := int32(0); p < j.Partitions; p++ {
				args = append(args, "-t", fmt.Sprintf("%s:%d:%s", j.Topic, p, which.ts))
			}
			out, err := runKcatCmd(ctx, "", args...)
			if err != nil {
				return r, err
			}
			// {"topic": {"topic": "topic", "0": {"partition": 0, "offset": 6}, ...}}
			var q map[string]map[string]json.RawMessage
			if err := json.Unmarshal(out, &q); err != nil {
				return r, fmt.Errorf("kcat -Q -J printed %q: %w", out, err)
			}
			for k, raw := range q[j.Topic] {
				if k == "topic" {
					continue
				}
				var p struct {
					Partition int32  `json:"partition"`
					Offset    int64  `json:"offset"`
					Error     string `json:"error"`
				}
				if err := json.Unmarshal(raw, &p); err != nil {
					return r, fmt.Errorf("kcat -Q -J partition %s: %q: %w", k, raw, err)
				}
				if p.Error != "" {
					return r, fmt.Errorf("kcat -Q partition %d: %s", p.Partition, p.Error)
				}
				which.out[p.Partition] = p.Offset
			}
		}
		return r, nil
	}
	return r, fmt.Errorf("unknown capability %q", j.Capability)
}

// kcatMember is `kcat -G`: records come as JSON lines on stdout, the
// rebalances as "assigned:" and "revoked:" lines on stderr.
type kcatMember struct {
	memberState
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
	err  error
}

var kcatPartition = regexp.MustCompile(`\[(\d+)\]`)

func startKcatMember(ctx context.Context, j job) (member, error) {
	cmd := exec.CommandContext(ctx, "kcat", "-b", strings.Join(j.Bootstrap, ","), "-G", j.Group, j.Topic, "-J", "-u",
		// No -o: kcat would start every assigned partition there instead
		// of at the group's committed offset.
		"-X", "auto.offset.reset=earliest",
		"-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500", "-X", "auto.commit.interval.ms=100",
		"-X", "fetch.wait.max.ms=100")
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start kcat -G: %w", err)
	}
	m := &kcatMember{cmd: cmd, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var km kcatMessage
			if err := json.Unmarshal(sc.Bytes(), &km); err != nil {
				m.fail(fmt.Errorf("kcat -G printed %q: %w", sc.Text(), err))
				continue
			}
			m.add(km.record())
		}
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			var ps []int32
			for _, mm := range kcatPartition.FindAllStringSubmatch(line, -1) {
				p, _ := strconv.Atoi(mm[1])
				ps = append(ps, int32(p))
			}
			switch {
			case strings.Contains(line, "assigned:"):
				m.assign(ps...)
			case strings.Contains(line, "revoked:"):
				m.revoke(ps...)
			case strings.Contains(line, "ERROR"):
				m.fail(fmt.Errorf("kcat -G: %s", line))
			}
		}
	}()
	go func() {
		wg.Wait()
		m.err = cmd.Wait()
		close(m.done)
	}()
	return m, nil
}

// close stops kcat with SIGTERM, on which it leaves the group after
// committing what it consumed.
func (m *kcatMember) close() error {
	m.once.Do(func() {
		m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.done:
		case <-time.After(30 * time.Second):
			m.cmd.Process.Kill()
			<-m.done
		}
	})
	if m.err != nil && !strings.Contains(m.err.Error(), "signal: terminated") {
		return m.err
	}
	return nil
}

// waitCommitted waits until j.Group has committed every record of
// j.Records.
func waitCommitted(ctx context.Context, cl *kgo.Client, j job) error {
	want := map[int32]int64{}
	for _, r := range j.Records {
		want[r.Partition] = max(want[r.Partition], r.Offset+1)
	}
	adm := kadm.NewClient(cl)
	return waitMembers(ctx, "the first member's commits", func() (bool, error) {
		offs, err := adm.FetchOffsets(ctx, j.Group)
		if err != nil {
			return false, nil
		}
		for p, o := range want {
			if c, ok := offs.Lookup(j.Topic, p); !ok || c.At != o {
				return false, nil
			}
		}
		return true, nil
	})
}
