package workloads

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
)

// TestTxnWorkloadAgainstKfake runs the txn workload against kfake's
// transactions: the history must check valid (cycles are reported, not
// judged), with commits, aborts, read-process-write transactions that read
// something, and every committed value read.
func TestTxnWorkloadAgainstKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	for _, group := range []string{"", "etl"} {
		t.Run("group="+group, func(t *testing.T) {
			c := fakeCluster(t, 3, "txn")
			m, rec := recorder()
			cfg := Config{Topic: "txn", Partitions: 3, Producers: 3, Consumers: 2, Sends: 400, Seed: 1,
				TxnConfig: TxnConfig{TxnAbortRatio: 0.2, TransactionTimeout: 30 * time.Second, TxnGroup: group}}
			w, err := NewTxn(cfg, rec, c.ListenAddrs())
			if err != nil {
				t.Fatal(err)
			}
			v := runAndCheck(t, w.Run, w.Drain, m)
			if v.Valid != checker.Valid {
				t.Fatalf("verdict %s: anomalies %v notes %q", v.Valid, v.Anomalies, v.Notes)
			}
			st := v.Stats.Txn
			if st == nil || st.OK == 0 || st.Fail == 0 || st.Polls == 0 {
				t.Fatalf("txn stats = %+v; want commits, aborts and polls", st)
			}
			var rpw, drained, committedValues, sendOffsets int
			for _, op := range m.Ops {
				switch {
				case op.F == history.FDrained && op.Key != "":
					drained++
				case op.F == history.FTxn && op.Type == history.OK:
					sends, read := 0, 0
					for _, mo := range op.Txn {
						switch mo.F {
						case history.MSend:
							sends++
							if mo.Offset < 0 {
								t.Errorf("committed send without an offset: %+v", op)
							}
						case history.MSendOffsets:
							sendOffsets++
							if mo.Group != group || len(mo.Offsets) == 0 {
								t.Errorf("send-offsets %+v", mo)
							}
						}
						for _, kr := range mo.Reads {
							read += len(kr.Records)
						}
					}
					committedValues += sends
					if sends > 0 && read > 0 {
						rpw++
					}
					if sends > 0 && op.CommitAt <= 0 {
						t.Errorf("committed txn without commit_at: %+v", op)
					}
				}
			}
			if rpw == 0 || drained != 3 {
				t.Errorf("read-process-write txns that read something: %d; drained partitions: %d of 3", rpw, drained)
			}
			if (group != "") != (sendOffsets > 0) {
				t.Errorf("group %q: %d committed txns sent offsets", group, sendOffsets)
			}
			// Every committed value was read (lost-write and unseen are
			// zero, and the count agrees).
			if st.ValuesRead < int64(committedValues) {
				t.Errorf("values read %d < committed values %d", st.ValuesRead, committedValues)
			}
		})
	}
}

// TestTxnDistinctIDsAndNewProcessAfterUnknown: producers use one
// transactional id per process, and a commit whose outcome is unknown ends
// the process: the producer goes on as a new process with a new id.
func TestTxnDistinctIDsAndNewProcessAfterUnknown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c := fakeCluster(t, 2, "txn")
	// Every commit of the first transactional id that commits is answered
	// with a broken connection, on every retry: its outcome is unknown.
	var mu sync.Mutex
	victim := ""
	ids := map[string]bool{}
	// The run ends once a third transactional id shows up: the victim's
	// producer went on as a new process.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.ControlKey(kmsg.EndTxn.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		if req := kreq.(*kmsg.EndTxnRequest); req.Commit {
			if victim == "" {
				victim = req.TransactionalID
			}
			if req.TransactionalID == victim {
				return nil, errors.New("drop the connection"), true
			}
		}
		return nil, nil, false
	})
	c.ControlKey(kmsg.InitProducerID.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		if id := kreq.(*kmsg.InitProducerIDRequest).TransactionalID; id != nil {
			ids[*id] = true
			if len(ids) == 3 {
				cancel()
			}
		}
		return nil, nil, false
	})
	m, rec := recorder()
	cfg := Config{Topic: "txn", Partitions: 2, Producers: 2, Consumers: 1, Seed: 2, SendInterval: 10 * time.Millisecond,
		RequestTimeout: 2 * time.Second, TxnConfig: TxnConfig{TxnAbortRatio: -1, TxnPollRatio: -1, TransactionTimeout: 2 * time.Second}}
	w, err := NewTxn(cfg, rec, c.ListenAddrs(), kgo.RequestRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("no third transactional id within 60 s")
	}
	mu.Lock()
	defer mu.Unlock()
	procsAfterInfo := map[int]bool{}
	infos := 0
	for _, op := range m.Ops {
		if op.F != history.FTxn || op.Type == history.Invoke || len(op.Txn) == 0 || op.Txn[0].F != history.MSend {
			continue
		}
		if procsAfterInfo[op.Process] {
			t.Errorf("process %d ran a transaction after one ended info", op.Process)
		}
		if op.Type == history.Info {
			infos++
			procsAfterInfo[op.Process] = true
		}
	}
	if infos != 1 {
		t.Fatalf("%d commits ended info, want the victim's one", infos)
	}
	if len(ids) != 2+infos {
		t.Errorf("%d distinct transactional ids (%v) for 2 producers and %d unknown outcomes; procs %v", len(ids), ids, infos, procsAfterInfo)
	}
	for id := range ids {
		if !strings.HasPrefix(id, "isrlab-txn-txn-") {
			t.Errorf("transactional id %q", id)
		}
	}
}

func TestTxnConfig(t *testing.T) {
	var cfg Config
	if err := yaml.Unmarshal([]byte("txn.abort.ratio: 0.3\ntxn.poll.ratio: -1\ntxn.max.sends: 2\ntransaction.timeout: 5s\ntransactional.id.prefix: p\ntxn.group.id: g\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	want := TxnConfig{TransactionalIDPrefix: "p", TransactionTimeout: 5 * time.Second, TxnAbortRatio: 0.3, TxnPollRatio: -1, TxnMaxSends: 2, TxnGroup: "g"}
	if cfg.TxnConfig != want {
		t.Errorf("parsed %+v, want %+v", cfg.TxnConfig, want)
	}
	if err := cfg.ValidateTxn(); err != nil {
		t.Errorf("ValidateTxn: %v", err)
	}
	if got := strings.Join(cfg.TxnKeys(), ","); got != "transactional.id.prefix,transaction.timeout,txn.abort.ratio,txn.poll.ratio,txn.max.sends,txn.group.id" {
		t.Errorf("TxnKeys = %s", got)
	}
	for _, bad := range []struct {
		cfg  Config
		want string
	}{
		{Config{TxnConfig: TxnConfig{TxnAbortRatio: 2}}, "txn.abort.ratio"},
		{Config{TxnConfig: TxnConfig{TxnMaxSends: 100}}, "txn.max.sends"},
		{Config{Acks: "1"}, "acks=all"},
		{Config{Rate: 5}, "rate is not a key of the txn workload"},
		{Config{Subscribe: true}, "not keys of the txn workload"},
	} {
		if err := bad.cfg.ValidateTxn(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: err = %v, want %q", bad.cfg, err, bad.want)
		}
	}
	if _, err := NewTxn(Config{Acks: "0"}, nil, []string{"127.0.0.1:1"}); err == nil {
		t.Error("NewTxn accepted acks=0")
	}
}

// TestTxnGroupProtocol: the txn workload takes the queue's group.protocol
// and group.remote.assignor (GroupProtocolOpts) for its txn.group.id
// sessions; group.protocol consumer without txn.group.id is refused, as
// are unknown protocols and assignors.
func TestTxnGroupProtocol(t *testing.T) {
	for _, tc := range []struct {
		own  map[string]string
		opts int
		want string
	}{
		{nil, 0, ""},
		{map[string]string{"group.protocol": "classic"}, 0, ""},
		{map[string]string{"group.protocol": "consumer"}, 2, ""},
		{map[string]string{"group.protocol": "consumer", "group.remote.assignor": "range"}, 2, ""},
		{map[string]string{"group.protocol": "eager"}, 0, `group.protocol "eager": use classic or consumer`},
		{map[string]string{"group.protocol": "consumer", "group.remote.assignor": "sticky"}, 0, `group.remote.assignor "sticky": use uniform or range`},
		{map[string]string{"group.remote.assignor": "range"}, 0, "group.remote.assignor range needs group.protocol consumer"},
	} {
		opts, err := GroupProtocolOpts(tc.own)
		if len(opts) != tc.opts || (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("GroupProtocolOpts(%v) = %d opts, %v; want %d, %q", tc.own, len(opts), err, tc.opts, tc.want)
		}
		grouped := Config{TxnConfig: TxnConfig{TxnGroup: "g"}}
		if opts, err := grouped.TxnGroupProtocolOpts(tc.own); len(opts) != tc.opts || (err == nil) != (tc.want == "") {
			t.Errorf("with txn.group.id, TxnGroupProtocolOpts(%v) = %d opts, %v", tc.own, len(opts), err)
		}
	}
	consumer := map[string]string{"group.protocol": "consumer"}
	if _, err := (Config{}).TxnGroupProtocolOpts(consumer); err == nil || !strings.Contains(err.Error(), "group.protocol consumer: the txn workload is in a consumer group only with txn.group.id") {
		t.Errorf("consumer without txn.group.id: %v", err)
	}
	if _, err := (Config{}).TxnGroupProtocolOpts(map[string]string{"group.protocol": "classic"}); err != nil {
		t.Errorf("classic without txn.group.id: %v", err)
	}
	w, err := NewTxn(Config{}, nil, []string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.UseGroupProtocol(consumer); err == nil {
		t.Error("a txn workload without txn.group.id took group.protocol consumer")
	}
	w, err = NewTxn(Config{TxnConfig: TxnConfig{TxnGroup: "g"}}, nil, []string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.UseGroupProtocol(consumer); err != nil || len(w.groupOpts) != 2 {
		t.Errorf("txn.group.id with group.protocol consumer: %v, %d opts", err, len(w.groupOpts))
	}
}

// TestTxnRequestTimeoutOverhead: the transactional producers wait
// request.timeout plus request.timeout.overhead for an answer, as the
// log workload's producers do (franz-go's default overhead is 10 s).
func TestTxnRequestTimeoutOverhead(t *testing.T) {
	w, err := NewTxn(Config{RequestTimeout: 2 * time.Second, RequestTimeoutOverhead: time.Second}, nil, []string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := w.txnClient(w.procs.take())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := cl.OptValue(kgo.RequestTimeoutOverhead); got != time.Second {
		t.Errorf("RequestTimeoutOverhead = %v, want 1s", got)
	}
	if got := cl.OptValue(kgo.ProduceRequestTimeout); got != 2*time.Second {
		t.Errorf("ProduceRequestTimeout = %v, want 2s", got)
	}
}
