package broker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// api is one served API: its key, the versions served, the versions each
// kafka.profile advertises and its handler. Each handler's file registers
// its API next to the handler, so the version table (ApiVersions, and the
// check on every request) and the dispatch map are one list and cannot
// disagree.
//
// The served range is Kafka 3.7's, and with transaction.version 1 or 2
// (KIP-890, 3.7 profile only) Kafka 4.0's for the transaction APIs
// (withTV). A profile only narrows what ApiVersions
// advertises, to what that Kafka release advertised (taken from its
// protocol definitions: 0.10.2's Protocol.java, the message JSON of
// 2.4.1, 2.6.3 and 3.7.1); requests at any served version are still
// answered, because the lab's own brokers and controller speak 3.7's
// inter-broker protocol whatever the profile (the profile's replication
// switches reproduce the era's behaviour).
//
// kafka.profile 4.0 advertises what a Kafka 4.0.0 broker lists (k40 at
// each API: KIP-896's minima, the release's maxima; the ZooKeeper era's
// inter-broker APIs left out), serves the newer versions its handlers
// answer (serve40: Fetch v17, Metadata v13, ListOffsets v10, ...), and
// closes the connection of a request below a KIP-896 minimum, as 4.0 does.
// TestApiVersionsKafka40 holds the table against the release's ranges.
//
// A request outside the served range closes the connection after a
// warning, as Kafka 3.7 does (SocketServer.parseRequestHeader throws
// InvalidRequestException for a version ApiKeys does not enable, and the
// processor closes the channel); only ApiVersions answers, at v0, with
// UNSUPPORTED_VERSION (KIP-511).
type api struct {
	name     string
	min, max int16                        // Kafka 3.7's range, advertised by default
	tvMax    int16                        // Kafka 4.0's max with transaction.version 1+ (0: the same as 3.7's)
	eras     map[string]wire.VersionRange // advertised range per profile where it is not [min, max]; Max < 0: absent
	// v40 is the range a Kafka 4.0.0 broker advertises (apis_kafka40.go;
	// Max < 0: a 4.0 broker does not list the API); max40 the version
	// isrlab serves up to under kafka.profile 4.0 when beyond 3.7's.
	v40    wire.VersionRange
	max40  int16
	handle func(*Broker, context.Context, *request)
}

var apis = map[int16]api{}

// era is what one or more kafka.profile values advertise for an API, or,
// with tv set, what transaction.version 1+ advertises beyond 3.7's range.
type era struct {
	profiles []string
	vr       wire.VersionRange
	tv       bool
	k40      bool // vr is Kafka 4.0.0's advertised range (vr.Max < 0: absent)
	serve40  bool // vr.Max is served under kafka.profile 4.0, beyond 3.7's max
}

// k40 is the range a Kafka 4.0.0 broker advertised for the API: KIP-896
// removed the versions below min. Under kafka.profile 4.0 isrlab
// advertises the part of it that it serves and closes the connection of
// a request below min, as 4.0 does.
func k40(min, max int16) era { return era{k40: true, vr: wire.VersionRange{Min: min, Max: max}} }

// not40 marks an API a Kafka 4.0 broker does not list (the ZooKeeper
// era's inter-broker APIs, controller APIs). isrlab's own controller
// still sends them, so they stay served.
func not40() era { return era{k40: true, vr: wire.VersionRange{Min: -1, Max: -1}} }

// serve40 is the highest version served under kafka.profile 4.0 where it
// is beyond 3.7's: the handler answers the newer versions' fields.
func serve40(max int16) era { return era{serve40: true, vr: wire.VersionRange{Max: max}} }

// withTV is the max version Kafka 4.0 advertised for a transaction API,
// served and advertised under kafka.profile 3.7 when transaction.version
// is 1 or 2 (KIP-890: the versions that allow TRANSACTION_ABORTABLE, and
// Produce v12, EndTxn v5 and TxnOffsetCommit v5 of part 2).
func withTV(max int16) era { return era{tv: true, vr: wire.VersionRange{Max: max}} }

// in is the range a profile's Kafka release advertised for the API.
func in(profile string, min, max int16) era {
	return era{profiles: []string{profile}, vr: wire.VersionRange{Min: min, Max: max}}
}

// notIn marks profiles whose Kafka release did not have the API at all.
func notIn(profiles ...string) era {
	return era{profiles: profiles, vr: wire.VersionRange{Min: -1, Max: -1}}
}

// serve registers API key with its served version range, the ranges that
// profiles advertise instead, and its handler.
func serve(key int16, name string, min, max int16, h func(*Broker, context.Context, *request), eras ...era) struct{} {
	if _, dup := apis[key]; dup {
		panic(fmt.Sprintf("broker: API %d (%s) registered twice", key, name))
	}
	a := api{name: name, min: min, max: max, handle: h, eras: map[string]wire.VersionRange{}, v40: wire.VersionRange{Min: -2, Max: -2}}
	for _, e := range eras {
		if e.k40 {
			a.v40 = e.vr
			continue
		}
		if e.serve40 {
			if e.vr.Max <= max {
				panic(fmt.Sprintf("broker: API %s: kafka.profile 4.0 max v%d is not beyond v%d", name, e.vr.Max, max))
			}
			a.max40 = e.vr.Max
			continue
		}
		if e.tv {
			if e.vr.Max <= max {
				panic(fmt.Sprintf("broker: API %s: transaction.version max v%d is not beyond v%d", name, e.vr.Max, max))
			}
			a.tvMax = e.vr.Max
			continue
		}
		for _, p := range e.profiles {
			if _, ok := kafkaconfig.Profiles[p]; !ok {
				panic(fmt.Sprintf("broker: API %s: unknown profile %q", name, p))
			}
			if e.vr.Max >= 0 && (e.vr.Min < min || e.vr.Max > max || e.vr.Min > e.vr.Max) {
				panic(fmt.Sprintf("broker: API %s: profile %s advertises v%d-%d outside the served v%d-%d", name, p, e.vr.Min, e.vr.Max, min, max))
			}
			a.eras[p] = e.vr
		}
	}
	if a.v40.Max == -2 {
		panic(fmt.Sprintf("broker: API %s: no Kafka 4.0 range (k40 or not40)", name))
	}
	apis[key] = a
	return struct{}{}
}

// servedTable is the range of every registered API: what requests are
// checked against. Kafka 4.0's transaction API versions are served only
// with transaction.version 1 or 2: otherwise the broker is 3.7's, which
// closes the connection of a Produce v11. Under kafka.profile 4.0 the
// versions KIP-896 removed are not served and the newer versions the
// handlers answer (serve40) are.
func servedTable(profile string, transactionVersion int) wire.Table {
	t := wire.Table{}
	for k, a := range apis {
		t[k] = a.served(profile, transactionVersion)
	}
	return t
}

func (a api) served(profile string, transactionVersion int) wire.VersionRange {
	vr := wire.VersionRange{Min: a.min, Max: a.max}
	if transactionVersion >= 1 && a.tvMax > 0 {
		vr.Max = a.tvMax
	}
	if profile == "4.0" {
		vr.Max = max(vr.Max, a.max40)
		if a.v40.Max >= 0 {
			vr.Min = max(vr.Min, a.v40.Min)
		}
	}
	return vr
}

// advertisedTable is what ApiVersions lists under a kafka.profile and
// transaction.version. Under 4.0 it is what a Kafka 4.0.0 broker lists,
// narrowed to what isrlab serves (testdata/apiversions/4.0.txt shows
// both).
func advertisedTable(profile string, transactionVersion int) wire.Table {
	t := wire.Table{}
	for k, a := range apis {
		vr, ok := a.eras[profile]
		switch {
		case profile == "4.0":
			vr = a.served(profile, transactionVersion)
			vr.Max = min(vr.Max, a.v40.Max)
		case !ok:
			vr = a.served(profile, transactionVersion)
		}
		if vr.Max >= 0 {
			t[k] = vr
		}
	}
	return t
}

// handlerOn adapts the handlers of one of the broker's API groups (a
// small type holding only what its handlers use) to serve: group picks
// the group out of the broker, as in
// serve(44, ..., configHandler((*configAPI).handleIncrementalAlterConfigs)).
func handlerOn[T any](group func(*Broker) T) func(h func(T, context.Context, *request)) func(*Broker, context.Context, *request) {
	return func(h func(T, context.Context, *request)) func(*Broker, context.Context, *request) {
		return func(b *Broker, ctx context.Context, rq *request) { h(group(b), ctx, rq) }
	}
}

// apiGroups are the broker's API groups whose handlers are not the
// broker's methods. Run makes them before it serves, once the coordinator
// client (and with it the controller) exists.
type apiGroups struct {
	groups     *groupAPI
	txn        *txnAPI
	txnVerify  *txnVerifier
	markers    *markerAPI
	quotas     *quotaAPI
	configs    *configAPI
	controller *controllerAPI
	scram      *scramAPI
}

// newAPIGroups gives each API group what its handlers use.
func (b *Broker) newAPIGroups() apiGroups {
	var co *coord.Client
	var ctrl Controller
	if b.cluster != nil {
		co, ctrl = b.cluster.coord, b.cluster.ctrl
		if b.cluster.kraft != nil {
			ctrl = forwarder{b.cluster}
		}
	}
	verify := &txnVerifier{
		find:            b.txnCoordinator,
		coordinatorFor:  b.coordinatorFor,
		client:          b.brokerClient,
		retryBackoff:    time.Duration(b.cfg.Int("add.partitions.to.txn.retry.backoff.ms")) * time.Millisecond,
		retryBackoffMax: time.Duration(b.cfg.Int("add.partitions.to.txn.retry.backoff.max.ms")) * time.Millisecond,
		log:             b.log,
	}
	g := apiGroups{
		groups:    &groupAPI{groups: b.groups, consumer: consumerProtocol(b.cfg)},
		txnVerify: verify,
		txn: &txnAPI{txns: b.txns, groups: b.groups, verify: verify,
			offsetsPartitions: b.cfg.Int("offsets.topic.num.partitions"), transactionVersion: b.cfg.Int("transaction.version")},
		markers:    &markerAPI{partition: b.partition, hook: b.txnMarkerHook},
		quotas:     &quotaAPI{store: &localQuotas{m: map[string]coord.ClientQuota{}}},
		configs:    &configAPI{cfg: b.cfg, id: b.id, meta: b.meta, coord: co, apply: b.applyTopicConfig, reloadKeystore: b.ls.reloadKeystore},
		controller: &controllerAPI{ctrl: ctrl, meta: b.meta},
	}
	g.scram = &scramAPI{store: &localScram{m: map[string]map[string]string{}}}
	if co != nil {
		g.quotas.store = co
		g.scram.store = co
	}
	return g
}

func (b *Broker) handlerTable() map[int16]handler {
	m := map[int16]handler{}
	for k, a := range apis {
		m[k] = func(ctx context.Context, rq *request) { a.handle(b, ctx, rq) }
	}
	return m
}

// ApiVersions is the one API answered at a version it does not serve: at
// v0 with UNSUPPORTED_VERSION (serveConn above the served range, the
// handler above the profile's); every other API closes the connection.
var _ = serve(18, "ApiVersions", 0, 3, (*Broker).handleApiVersions, in("0.10", 0, 0), k40(0, 4), serve40(4))

var (
	errTopicExists  = errors.New("topic exists")
	errUnknownTopic = errors.New("unknown topic")
)

var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// validTopicName applies Kafka's topic name rules.
func validTopicName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 249 && legalTopic.MatchString(name)
}

func partitionConfig(tc *kafkaconfig.Config) partition.Config {
	return partition.Config{
		MinInsyncReplicas: tc.Int("min.insync.replicas"),
		MaxMessageBytes:   tc.Int("max.message.bytes"),
	}
}

func (b *Broker) handleApiVersions(_ context.Context, rq *request) {
	req, _ := rq.req.(*kmsg.ApiVersionsRequest)
	rq.respond(b.apiVersions(rq.hdr.Version, req))
}

// softwareName is KIP-511's pattern for ApiVersions v3's client software
// name and version.
var softwareName = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$`)

// apiVersions answers ApiVersions at version from the profile's advertised
// table; req is nil when the version was above every served one and the
// body was not decoded.
func (b *Broker) apiVersions(version int16, req *kmsg.ApiVersionsRequest) *kmsg.ApiVersionsResponse {
	resp := b.versions.ApiVersions(version)
	if tv := int16(b.cfg.Int("transaction.version")); resp.ErrorCode == 0 && version >= 3 && tv >= 1 {
		// Kafka 4.0 lists transaction.version among the supported
		// features and, at its level, the finalized ones (a feature at
		// level 0 is not finalized); clients read the level from there.
		sf := kmsg.NewApiVersionsResponseSupportedFeature()
		sf.Name, sf.MinVersion, sf.MaxVersion = "transaction.version", 0, 2
		resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
		ff := kmsg.NewApiVersionsResponseFinalizedFeature()
		ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = "transaction.version", tv, tv
		resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
		resp.FinalizedFeaturesEpoch = 1
	}
	if !consumerProtocol(b.cfg) {
		// KIP-848's APIs are advertised only while the consumer group
		// protocol is enabled (group.coordinator.rebalance.protocols).
		resp.ApiKeys = slices.DeleteFunc(resp.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool {
			return k.ApiKey == 68 || k.ApiKey == 69
		})
	}
	switch {
	case resp.ErrorCode != 0:
		if b.cfg.String("kafka.profile") == "0.10" {
			// Before KIP-511 (Kafka 2.4) the error came with no versions.
			resp.ApiKeys = nil
		}
	case version >= 3 && req != nil && (!softwareName.MatchString(req.ClientSoftwareName) || !softwareName.MatchString(req.ClientSoftwareVersion)):
		resp.ErrorCode = kerr.InvalidRequest.Code
		resp.ApiKeys = nil
	}
	return resp
}
