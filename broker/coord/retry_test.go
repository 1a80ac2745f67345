package coord

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// scriptKV answers Txn commits and Puts with the scripted errors in turn
// (nil from then on) and counts the attempts.
type scriptKV struct {
	clientv3.KV
	errs  []error
	calls int
}

func (s *scriptKV) next() error {
	s.calls++
	if len(s.errs) == 0 {
		return nil
	}
	err := s.errs[0]
	s.errs = s.errs[1:]
	return err
}

func (s *scriptKV) Put(context.Context, string, string, ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	if err := s.next(); err != nil {
		return nil, err
	}
	return &clientv3.PutResponse{}, nil
}

func (s *scriptKV) Txn(context.Context) clientv3.Txn { return &scriptTxn{s} }

type scriptTxn struct{ s *scriptKV }

func (t *scriptTxn) If(...clientv3.Cmp) clientv3.Txn  { return t }
func (t *scriptTxn) Then(...clientv3.Op) clientv3.Txn { return t }
func (t *scriptTxn) Else(...clientv3.Op) clientv3.Txn { return t }
func (t *scriptTxn) Commit() (*clientv3.TxnResponse, error) {
	if err := t.s.next(); err != nil {
		return nil, err
	}
	return &clientv3.TxnResponse{}, nil
}

func TestRetryKV(t *testing.T) {
	noLeader := rpctypes.ErrNoLeader
	tests := []struct {
		name      string
		errs      []error
		timeout   time.Duration
		wantErr   error
		wantCalls int // 0: at least one
	}{
		{"success", nil, time.Second, nil, 1},
		{"no leader twice then success", []error{noLeader, noLeader}, time.Second, nil, 3},
		{"raw grpc no leader", []error{rpctypes.ErrGRPCNoLeader}, time.Second, nil, 2},
		{"leader changed is ambiguous: no retry", []error{rpctypes.ErrLeaderChanged}, time.Second, rpctypes.ErrLeaderChanged, 1},
		{"timeout is ambiguous: no retry", []error{rpctypes.ErrTimeout}, time.Second, rpctypes.ErrTimeout, 1},
		{"compare failure passes through", []error{rpctypes.ErrCompacted}, time.Second, rpctypes.ErrCompacted, 1},
		{"no leader until the deadline", []error{noLeader, noLeader, noLeader, noLeader, noLeader, noLeader, noLeader, noLeader, noLeader, noLeader}, 200 * time.Millisecond, noLeader, 0},
	}
	for _, tt := range tests {
		for _, op := range []string{"txn", "put"} {
			t.Run(tt.name+"/"+op, func(t *testing.T) {
				s := &scriptKV{errs: append([]error(nil), tt.errs...)}
				kv := retryKV{s}
				ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
				defer cancel()
				var err error
				if op == "txn" {
					_, err = kv.Txn(ctx).If().Then().Commit()
				} else {
					_, err = kv.Put(ctx, "k", "v")
				}
				if !errors.Is(err, tt.wantErr) && err != tt.wantErr {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				if tt.wantCalls > 0 && s.calls != tt.wantCalls {
					t.Fatalf("%d attempts, want %d", s.calls, tt.wantCalls)
				}
				if tt.wantCalls == 0 && (s.calls < 2 || len(s.errs) == 0) {
					t.Fatalf("%d attempts before the deadline (%d scripted errors left)", s.calls, len(s.errs))
				}
			})
		}
	}
}
