package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// Config sources in DescribeConfigs (Kafka's ConfigSource).
const (
	sourceTopic          = 1
	sourceDynamicBroker  = 2
	sourceDynamicDefault = 3
	sourceStaticBroker   = 4
	sourceDefault        = 5
	resourceTypeTopic    = 2
	resourceTypeBroker   = 4
)

// configAPI answers the config APIs (DescribeConfigs, AlterConfigs,
// IncrementalAlterConfigs) for topics and for this broker.
type configAPI struct {
	cfg   *kafkaconfig.Config
	id    int32
	meta  *metadata
	coord *coord.Client // nil standalone
	// apply gives the local replica of a topic's partition, if any, a
	// new topic config.
	apply func(topic string, idx int32, tc *kafkaconfig.Config)
	// reloadKeystore reads (and with apply, serves) a listener's new
	// keystore, for listener.name.<l>.ssl.keystore.location.
	reloadKeystore func(listener, location string, apply bool) error
	dynamic        dynamicConfigs
}

var configHandler = handlerOn(func(b *Broker) *configAPI { return b.api.configs })

// describedTopicConfigs is what DescribeConfigs reports for a topic: in a
// cluster the coordinator's current overrides, as Kafka reads them from
// ZooKeeper, because the topic watch may not have brought a change (or a
// new topic's overrides) to this broker's cache yet; the cached ones when
// the coordinator does not answer in time, and standalone.
func (a *configAPI) describedTopicConfigs(ctx context.Context, topic string, cached map[string]string) map[string]string {
	if a.coord == nil {
		return cached
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := a.coord.TopicConfig(ctx, topic)
	if err != nil {
		return cached
	}
	return c
}

var _ = serve(32, "DescribeConfigs", 0, 4, configHandler((*configAPI).handleDescribeConfigs), notIn("0.10"), in("2.4", 0, 2), in("2.6", 0, 3), k40(1, 4))

// handleDescribeConfigs describes topic and broker configs.
func (a *configAPI) handleDescribeConfigs(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range req.Resources {
		sr := kmsg.NewDescribeConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		want := map[string]bool{}
		for _, k := range rr.ConfigNames {
			want[k] = true
		}
		add := func(c *kafkaconfig.Config, k, v string, source int8, readOnly bool) {
			if len(want) > 0 && !want[k] {
				return
			}
			e := kmsg.NewDescribeConfigsResponseResourceConfig()
			e.Name = k
			e.Value = &v
			e.ReadOnly = readOnly
			e.Source = kmsg.ConfigSource(source)
			e.IsDefault = source == sourceDefault
			if d, ok := c.Def(k); ok {
				e.ConfigType = configType(d.Type)
				if d.Type == kafkaconfig.Password {
					// Kafka never sends a password's value.
					e.Value, e.IsSensitive = nil, true
				}
				if req.IncludeDocumentation {
					doc := d.Doc
					e.Documentation = &doc
				}
			}
			sr.Configs = append(sr.Configs, e)
		}
		switch rr.ResourceType {
		case resourceTypeTopic:
			t, ok := a.meta.topic(rr.ResourceName)
			if !ok {
				sr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				break
			}
			configs := a.describedTopicConfigs(ctx, rr.ResourceName, t.Configs)
			tc, err := a.cfg.TopicConfig(configs)
			if err != nil {
				sr.ErrorCode = kerr.InvalidConfig.Code
				break
			}
			for _, k := range tc.Keys() {
				src := int8(sourceDefault)
				if _, ok := configs[k]; ok {
					src = sourceTopic
				} else if bk := kafkaconfig.TopicToBroker[k]; bk != "" && a.cfg.IsSet(bk) {
					src = sourceStaticBroker
				}
				add(tc, k, tc.String(k), src, false)
			}
		case resourceTypeBroker:
			id, err := a.brokerResourceID(rr.ResourceName)
			if err != nil {
				msg := err.Error()
				sr.ErrorCode, sr.ErrorMessage = kerr.InvalidRequest.Code, &msg
				break
			}
			perBroker, defaults := a.dynamicBrokerConfigs(ctx)
			// Precedence: this broker's dynamic value, the cluster-wide
			// dynamic default, server.properties, the default. Read-only
			// is what Kafka cannot change dynamically.
			value := func(k, v string, src int8) (string, int8) {
				if dv, ok := defaults[k]; ok {
					v, src = dv, sourceDynamicDefault
				}
				if dv, ok := perBroker[k]; ok {
					v, src = dv, sourceDynamicBroker
				}
				return v, src
			}
			readOnly := func(k string) bool { _, ok := kafkaconfig.Kafka37DynamicBrokerConfigs[k]; return !ok }
			if id == nil {
				// The cluster-wide default resource: only the dynamic
				// defaults, as Kafka's ConfigHelper describes it.
				for _, k := range slices.Sorted(maps.Keys(defaults)) {
					add(a.cfg, k, defaults[k], sourceDynamicDefault, readOnly(k))
				}
				break
			}
			for _, k := range a.cfg.Keys() {
				src := int8(sourceDefault)
				if a.cfg.IsSet(k) {
					src = sourceStaticBroker
				}
				v, src := value(k, a.cfg.String(k), src)
				add(a.cfg, k, v, src, readOnly(k))
			}
			// Every other Kafka 3.7 broker key, at Kafka's default unless
			// set dynamically.
			for _, d := range kafkaconfig.Kafka37BrokerDefaults {
				if a.cfg.Known(d.Name) || (len(want) > 0 && !want[d.Name]) {
					continue
				}
				e := kafkaDefaultEntry(d, req.IncludeDocumentation)
				if v, src := value(d.Name, "", sourceDefault); src != sourceDefault {
					e.Value, e.Source, e.IsDefault = &v, kmsg.ConfigSource(src), false
				}
				e.ReadOnly = readOnly(d.Name)
				sr.Configs = append(sr.Configs, e)
			}
			// Dynamic keys that are not KafkaConfig's (the replication
			// throttles), when set.
			for _, k := range kafkaconfig.DynamicOnlyBrokerConfigs {
				if v, src := value(k, "", sourceDefault); src != sourceDefault {
					add(a.cfg, k, v, src, false)
				}
			}
		default:
			sr.ErrorCode = kerr.InvalidRequest.Code
		}
		resp.Resources = append(resp.Resources, sr)
	}
	rq.respond(resp)
}

func configType(t kafkaconfig.Type) kmsg.ConfigType {
	switch t {
	case kafkaconfig.Bool:
		return kmsg.ConfigTypeBoolean
	case kafkaconfig.Int:
		return kmsg.ConfigTypeInt
	case kafkaconfig.Long:
		return kmsg.ConfigTypeLong
	case kafkaconfig.Double:
		return kmsg.ConfigTypeDouble
	case kafkaconfig.List:
		return kmsg.ConfigTypeList
	case kafkaconfig.Password:
		return kmsg.ConfigTypePassword
	}
	return kmsg.ConfigTypeString
}

// Incremental config operations (IncrementalAlterConfigs).
const (
	opSet      = 0
	opDelete   = 1
	opAppend   = 2
	opSubtract = 3
)

// incrementalOps applies IncrementalAlterConfigs operations to a BROKER
// resource's dynamic configs as Kafka's ZkAdminManager does: a key named
// twice or a null value to set is refused before anything else, append
// and subtract only work on list keys (starting from the current value or
// Kafka's default).
func incrementalOps(ops []kmsg.IncrementalAlterConfigsRequestResourceConfig) func(map[string]string) (map[string]string, error) {
	return func(cur map[string]string) (map[string]string, error) {
		seen := map[string]bool{}
		for _, c := range ops {
			if seen[c.Name] {
				return nil, invalidDynamicConfig{fmt.Errorf("error due to duplicate config keys: %s", c.Name)}
			}
			seen[c.Name] = true
			if c.Value == nil && c.Op != opDelete {
				return nil, invalidDynamicConfig{fmt.Errorf("null value not supported for: %s", c.Name)}
			}
		}
		for _, c := range ops {
			switch c.Op {
			case opSet:
				cur[c.Name] = *c.Value
			case opDelete:
				delete(cur, c.Name)
			case opAppend, opSubtract:
				if kafkaconfig.KafkaType(c.Name) != "list" {
					return nil, invalidDynamicConfig{fmt.Errorf("config value append or subtract is not allowed for config key: %s", c.Name)}
				}
				old, ok := cur[c.Name]
				if !ok {
					old = kafkaconfig.KafkaDefaultValue(c.Name)
				}
				items := splitList(old)
				if c.Op == opAppend {
					items = append(items, splitList(*c.Value)...)
				} else {
					items = slices.DeleteFunc(items, func(s string) bool { return slices.Contains(splitList(*c.Value), s) })
				}
				cur[c.Name] = strings.Join(items, ",")
			default:
				return nil, invalidDynamicConfig{fmt.Errorf("unknown operation %d on %s", c.Op, c.Name)}
			}
		}
		return cur, nil
	}
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var _ = serve(44, "IncrementalAlterConfigs", 0, 1, configHandler((*configAPI).handleIncrementalAlterConfigs), notIn("0.10"), k40(0, 1))

// handleIncrementalAlterConfigs sets or deletes topic-level overrides and
// dynamic broker configs (alterBrokerConfigs).
func (a *configAPI) handleIncrementalAlterConfigs(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, rr := range req.Resources {
		sr := kmsg.NewIncrementalAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		fail := func(e *kerr.Error, msg string) {
			sr.ErrorCode = e.Code
			sr.ErrorMessage = &msg
		}
		if rr.ResourceType == resourceTypeBroker {
			if e, msg := a.alterBrokerConfigs(ctx, rr.ResourceName, req.ValidateOnly, incrementalOps(rr.Configs)); e != nil {
				fail(e, msg)
			}
			resp.Resources = append(resp.Resources, sr)
			continue
		}
		if rr.ResourceType != resourceTypeTopic {
			fail(kerr.InvalidRequest, fmt.Sprintf("unsupported resource type %d", rr.ResourceType))
			resp.Resources = append(resp.Resources, sr)
			continue
		}
		t, ok := a.meta.topic(rr.ResourceName)
		if !ok {
			fail(kerr.UnknownTopicOrPartition, "unknown topic "+rr.ResourceName)
			resp.Resources = append(resp.Resources, sr)
			continue
		}
		next := map[string]string{}
		for k, v := range t.Configs {
			next[k] = v
		}
		bad := ""
		for _, c := range rr.Configs {
			switch c.Op {
			case opSet:
				if c.Value == nil {
					bad = "null value for " + c.Name
				} else {
					next[c.Name] = *c.Value
				}
			case opDelete:
				delete(next, c.Name)
			default:
				bad = "unsupported operation on " + c.Name
			}
		}
		if bad == "" {
			if _, err := a.cfg.TopicConfig(next); err != nil {
				bad = err.Error()
			}
		}
		switch {
		case bad != "":
			fail(kerr.InvalidConfig, bad)
		case req.ValidateOnly:
		default:
			if err := a.alterTopicConfig(ctx, rr.ResourceName, next); err != nil {
				fail(kerr.UnknownServerError, err.Error())
			}
		}
		resp.Resources = append(resp.Resources, sr)
	}
	rq.respond(resp)
}

// alterTopicConfig replaces a topic's overrides and applies them to its
// partitions.
func (a *configAPI) alterTopicConfig(ctx context.Context, topic string, configs map[string]string) error {
	tc, err := a.cfg.TopicConfig(configs)
	if err != nil {
		return err
	}
	if a.coord != nil {
		// Every broker picks the change up from the coordinator.
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return a.coord.SetTopicConfig(ctx, nil, topic, configs)
	}
	m := a.meta
	m.mu.Lock()
	t, ok := m.topics[topic]
	if !ok {
		m.mu.Unlock()
		return errUnknownTopic
	}
	old := t.Configs
	t.Configs = configs
	if err := m.persistLocked(); err != nil {
		t.Configs = old
		m.mu.Unlock()
		return err
	}
	n := len(t.Partitions)
	m.mu.Unlock()
	for i := 0; i < n; i++ {
		a.apply(topic, int32(i), tc)
	}
	return nil
}

// kafkaDefaultEntry reports a Kafka broker key isrlab does not implement:
// read-only, at Kafka 3.7's default, a password's value hidden.
func kafkaDefaultEntry(d kafkaconfig.KafkaDefault, doc bool) kmsg.DescribeConfigsResponseResourceConfig {
	e := kmsg.NewDescribeConfigsResponseResourceConfig()
	e.Name = d.Name
	if !d.Null && d.Type != "password" {
		v := d.Default
		e.Value = &v
	}
	e.ReadOnly, e.IsDefault, e.Source = true, true, kmsg.ConfigSource(sourceDefault)
	e.IsSensitive = d.Type == "password"
	e.ConfigType = map[string]kmsg.ConfigType{
		"boolean": kmsg.ConfigTypeBoolean, "string": kmsg.ConfigTypeString, "int": kmsg.ConfigTypeInt,
		"short": kmsg.ConfigTypeShort, "long": kmsg.ConfigTypeLong, "double": kmsg.ConfigTypeDouble,
		"list": kmsg.ConfigTypeList, "class": kmsg.ConfigTypeClass, "password": kmsg.ConfigTypePassword,
	}[d.Type]
	if doc {
		s := "Not implemented by isrlab; reported at Kafka 3.7's default."
		e.Documentation = &s
	}
	return e
}
