package clients

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// TestWatchAssignments: a commitWatch with assigned set reports the
// member's partitions of its topic from each SyncGroup answer (read in
// pieces, behind another answer), nothing for a refused sync, and the
// revocation when the client rejoins (a JoinGroup request) while
// holding partitions, not before its first assignment.
func TestWatchAssignments(t *testing.T) {
	var got [][]int32
	w := &commitWatch{topic: "isrlab", assigned: func(ps []int32) { got = append(got, ps) },
		report: func(*kmsg.OffsetCommitRequest, *kmsg.OffsetCommitResponse, error) {}}
	raw := &wireConn{}
	c := &watchedConn{Conn: raw, w: w, pending: map[int32]*kmsg.OffsetCommitRequest{}, syncs: map[int32]int16{}}
	write := func(req kmsg.Request, corr int32) {
		t.Helper()
		if _, err := c.Write(requestFrame(req, corr)); err != nil {
			t.Fatal(err)
		}
	}
	syncAnswer := func(corr int32, code int16, parts map[string][]int32) []byte {
		a := kmsg.NewConsumerMemberAssignment()
		for _, topic := range []string{"other", "isrlab"} {
			if ps, ok := parts[topic]; ok {
				at := kmsg.NewConsumerMemberAssignmentTopic()
				at.Topic, at.Partitions = topic, ps
				a.Topics = append(a.Topics, at)
			}
		}
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode, resp.MemberAssignment = code, a.AppendTo(nil)
		return responseFrame(resp, corr)
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 1
	sync := kmsg.NewPtrSyncGroupRequest()
	hb := kmsg.NewPtrHeartbeatRequest()
	write(join, 1) // the first join: nothing held, nothing revoked
	write(sync, 2)
	write(hb, 3)
	raw.reads = append(raw.reads, responseFrame(kmsg.NewPtrHeartbeatResponse(), 3))
	raw.reads = append(raw.reads, chop(syncAnswer(2, 0, map[string][]int32{"other": {5}, "isrlab": {2, 0}}), 3)...)
	drain := func() {
		buf := make([]byte, 7)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}
	drain()
	write(join, 4) // a rejoin: revoked
	write(sync, 5)
	raw.reads = append(raw.reads, syncAnswer(5, kerr.RebalanceInProgress.Code, nil))
	write(sync, 6)
	raw.reads = append(raw.reads, syncAnswer(6, 0, map[string][]int32{"isrlab": {1}}))
	drain()
	want := [][]int32{{0, 2}, {}, {1}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("assignments %v, want %v", got, want)
	}
}

// TestKafkaGoCommitOutcome: a synchronous CommitMessages' outcome from
// its error and the OffsetCommit requests read on the wire while it ran.
func TestKafkaGoCommitOutcome(t *testing.T) {
	asked := []history.PartitionOffset{{Partition: 0, Offset: 10}, {Partition: 1, Offset: 4}}
	ok := workloads.Committed{Type: history.OK, Offsets: asked}
	refused := workloads.Committed{Type: history.Fail, Offsets: []history.PartitionOffset{}, Error: "ILLEGAL_GENERATION"}
	lost := workloads.Committed{Type: history.Info, Offsets: asked, Error: "read tcp: i/o timeout"}
	for _, tc := range []struct {
		name string
		err  error
		got  []workloads.Committed
		want history.Type
	}{
		{"accepted", nil, []workloads.Committed{ok}, history.OK},
		{"accepted after a lost answer", nil, []workloads.Committed{lost, ok}, history.OK},
		{"stopped waiting", context.DeadlineExceeded, nil, history.Info},
		{"stopped waiting, a request written", fmt.Errorf("wait: %w", context.DeadlineExceeded), []workloads.Committed{refused}, history.Info},
		{"reader closed", io.ErrClosedPipe, nil, history.Fail},
		{"refused on every attempt", kafka.IllegalGeneration, []workloads.Committed{refused, refused, refused}, history.Fail},
		{"refused after a lost answer", kafka.IllegalGeneration, []workloads.Committed{lost, refused, refused}, history.Info},
		{"connection broken on the last attempt", io.ErrUnexpectedEOF, []workloads.Committed{refused, refused, lost}, history.Info},
		{"no request written", errors.New("no coordinator connection"), nil, history.Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkagoCommitOutcome(tc.err, asked, tc.got)
			if c.Type != tc.want {
				t.Errorf("%+v, want %s", c, tc.want)
			}
			if c.Type == history.Info && !slices.Equal(c.Offsets, asked) {
				t.Errorf("info names %v, want every offset asked for", c.Offsets)
			}
		})
	}
}

// TestKafkaGoGroupCheck: kafka-go runs the queue workload; its commit
// interval is the workload's, and its producers are not idempotent.
func TestKafkaGoGroupCheck(t *testing.T) {
	base := workloads.Config{Topic: "t", Partitions: 1}
	for _, tc := range []struct {
		cfg  workloads.Config
		own  map[string]string
		want string
	}{
		{base, nil, ""},
		{base, map[string]string{"Reader.SessionTimeout": "6s"}, ""},
		{base, map[string]string{"Reader.CommitInterval": "1s"}, "client kafka-go: client.config.Reader.CommitInterval: set by the driver"},
		{workloads.Config{Topic: "t", Partitions: 1, Idempotent: true}, nil, "client kafka-go: kafka-go has no idempotent producer (enable.idempotence)"},
	} {
		err := Check(workloads.ClientSpec{Client: KafkaGo, Config: tc.own}, "queue", tc.cfg)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v %v: %v, want %q", tc.cfg.Idempotent, tc.own, err, tc.want)
		}
	}
}
