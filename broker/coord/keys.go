package coord

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Key prefixes relative to the chroot.
const (
	brokerIDsPrefix    = "/brokers/ids/"
	controllerPrefix   = "/controller"
	topicsPrefix       = "/brokers/topics/"
	topicConfigPrefix  = "/config/topics/"
	deleteTopicsPrefix = "/admin/delete_topics/"
	isrChangePrefix    = "/isr_change_notification/"
	isrChangeSeqPrefix = isrChangePrefix + "isr_change_"
	producerIDBlockKey = "/latest_producer_id_block"
)

func brokerKey(id int32) string        { return brokerIDsPrefix + strconv.FormatInt(int64(id), 10) }
func topicKey(t string) string         { return topicsPrefix + t }
func topicConfigKey(t string) string   { return topicConfigPrefix + t }
func deleteTopicKey(t string) string   { return deleteTopicsPrefix + t }
func partitionsPrefix(t string) string { return topicsPrefix + t + "/partitions/" }
func partitionStateKey(t string, p int32) string {
	return fmt.Sprintf("%s%d/state", partitionsPrefix(t), p)
}

// parsePartitionStateKey splits "/brokers/topics/<t>/partitions/<p>/state".
func parsePartitionStateKey(k string) (topic string, p int32, ok bool) {
	rest, found := strings.CutPrefix(k, topicsPrefix)
	if !found {
		return "", 0, false
	}
	topic, rest, found = strings.Cut(rest, "/partitions/")
	if !found {
		return "", 0, false
	}
	ps, found := strings.CutSuffix(rest, "/state")
	if !found {
		return "", 0, false
	}
	n, err := strconv.ParseInt(ps, 10, 32)
	if err != nil {
		return "", 0, false
	}
	return topic, int32(n), true
}

// topicFromKey returns the topic of a "/brokers/topics/<t>" key and false
// for keys below a topic (partition states).
func topicFromKey(k string) (string, bool) {
	t, found := strings.CutPrefix(k, topicsPrefix)
	if !found || t == "" || strings.Contains(t, "/") {
		return "", false
	}
	return t, true
}

// legalTopic is Kafka's rule: ASCII letters, digits, '.', '_' and '-'.
var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// ValidateTopicName applies Kafka's topic naming rules.
func ValidateTopicName(t string) error {
	switch {
	case t == "":
		return fmt.Errorf("%w: empty topic name", ErrInvalidTopic)
	case t == "." || t == "..":
		return fmt.Errorf("%w: topic name %q is not allowed", ErrInvalidTopic, t)
	case len(t) > 249:
		return fmt.Errorf("%w: topic name longer than 249 characters", ErrInvalidTopic)
	case !legalTopic.MatchString(t):
		return fmt.Errorf("%w: topic name %q has characters other than ASCII letters, digits, '.', '_' and '-'", ErrInvalidTopic, t)
	}
	return nil
}
