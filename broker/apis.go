package broker

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/isrlab/isrlab/broker/config"
	klog "github.com/isrlab/isrlab/broker/log"
	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/broker/wire"
)

// api is one served API: its key, the versions served and its handler.
// Each handler's file registers its API next to the handler, so the version
// table (ApiVersions, and the check on every request) and the dispatch map
// are one list and cannot disagree. Versions start where record batches
// are v2 (magic 2) and stop before topic IDs replace topic names.
type api struct {
	name     string
	min, max int16
	handle   func(*Broker, context.Context, *request)
}

var apis = map[int16]api{}

// serve registers API key with its version range and handler.
func serve(key int16, name string, min, max int16, h func(*Broker, context.Context, *request)) struct{} {
	if _, dup := apis[key]; dup {
		panic(fmt.Sprintf("broker: API %d (%s) registered twice", key, name))
	}
	apis[key] = api{name: name, min: min, max: max, handle: h}
	return struct{}{}
}

// versionTable is the table of every registered API.
func versionTable() wire.Table {
	t := wire.Table{}
	for k, a := range apis {
		t[k] = wire.VersionRange{Min: a.min, Max: a.max}
	}
	return t
}

func (b *Broker) handlerTable() map[int16]handler {
	m := map[int16]handler{}
	for k, a := range apis {
		m[k] = func(ctx context.Context, rq *request) { a.handle(b, ctx, rq) }
	}
	return m
}

var _ = serve(18, "ApiVersions", 0, 3, (*Broker).handleApiVersions)

var (
	errTopicExists  = errors.New("topic exists")
	errUnknownTopic = errors.New("unknown topic")
)

var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// validTopicName applies Kafka's topic name rules.
func validTopicName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 249 && legalTopic.MatchString(name)
}

func partitionConfig(tc *config.Config) partition.Config {
	return partition.Config{
		MinInsyncReplicas: tc.Int("min.insync.replicas"),
		MaxMessageBytes:   tc.Int("max.message.bytes"),
	}
}

func tpKey(topic string, p int32) klog.TopicPartition {
	return klog.TopicPartition{Topic: topic, Partition: p}
}

func (b *Broker) handleApiVersions(_ context.Context, rq *request) {
	rq.respond(b.versions.ApiVersions(rq.hdr.Version))
}
