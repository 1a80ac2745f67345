package coord

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrBrokerIDInUse: another live session holds /brokers/ids/<id>.
	ErrBrokerIDInUse = errors.New("broker id already registered")
	// ErrNotController: the write was fenced because the caller's
	// leadership is gone (resigned, expired, or a newer controller exists).
	ErrNotController = errors.New("not the controller")
	// ErrNoController: no controller is elected right now.
	ErrNoController = errors.New("no controller elected")
	// ErrVersionMismatch: a compare-and-swap found a different version. The
	// error is a *VersionMismatchError naming the partition.
	ErrVersionMismatch = errors.New("partition state version mismatch")
	// ErrTopicExists: CreateTopic found the topic already present.
	ErrTopicExists = errors.New("topic already exists")
	// ErrTopicNotFound: the topic (or partition state) does not exist.
	ErrTopicNotFound = errors.New("topic not found")
	// ErrPartitionNotFound: no state exists for the partition.
	ErrPartitionNotFound = errors.New("partition state not found")
	// ErrNoQuorum: the coordinator cluster did not answer in time or has no
	// leader. Wraps context.DeadlineExceeded when that was the cause.
	ErrNoQuorum = errors.New("coordinator unavailable (no quorum or unreachable)")
	// ErrSessionLost: the lease behind a registration or leadership expired
	// or was revoked.
	ErrSessionLost = errors.New("coordinator session lost")
	// ErrInvalidTopic: the topic name or assignment is not acceptable.
	ErrInvalidTopic = errors.New("invalid topic")
	// ErrTopicChanged: SetTopicAssignment found the topic at another
	// version than expected (someone rewrote its assignment meanwhile).
	ErrTopicChanged = errors.New("topic assignment changed")
)

// VersionMismatchError reports the first partition whose compare-and-swap
// failed. Expected is the version the caller gave; Actual is the version
// found (0 when the state does not exist).
type VersionMismatchError struct {
	Topic     string
	Partition int32
	Expected  int64
	Actual    int64
}

func (e *VersionMismatchError) Error() string {
	return fmt.Sprintf("partition state %s-%d: expected version %d, found %d", e.Topic, e.Partition, e.Expected, e.Actual)
}

// Is makes errors.Is(err, ErrVersionMismatch) true.
func (e *VersionMismatchError) Is(target error) bool { return target == ErrVersionMismatch }

// BrokerIDInUseError reports who holds a broker id.
type BrokerIDInUseError struct {
	ID int32
	// Epoch is the holder's broker epoch (CreateRevision).
	Epoch int64
}

func (e *BrokerIDInUseError) Error() string {
	return fmt.Sprintf("broker id %d already registered (epoch %d)", e.ID, e.Epoch)
}

// Is makes errors.Is(err, ErrBrokerIDInUse) true.
func (e *BrokerIDInUseError) Is(target error) bool { return target == ErrBrokerIDInUse }

// wrapErr names the operation and maps etcd's ways of saying "no quorum" to
// ErrNoQuorum. A cancellation by the caller stays a plain context.Canceled.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if isNoQuorum(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrNoQuorum, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func isNoQuorum(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, rpctypes.ErrNoLeader),
		errors.Is(err, rpctypes.ErrGRPCNoLeader),
		errors.Is(err, rpctypes.ErrTimeout),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost),
		errors.Is(err, rpctypes.ErrTimeoutWaitAppliedIndex),
		errors.Is(err, rpctypes.ErrLeaderChanged):
		return true
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return true
		}
	}
	return false
}
