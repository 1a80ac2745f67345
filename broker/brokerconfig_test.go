package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// TestDynamicBrokerConfigs: dynamic broker configs as Kafka keeps them.
// IncrementalAlterConfigs on a BROKER resource sets a key for one broker
// (name = its id) or for every broker (the empty name); DescribeConfigs
// reports the value with source DYNAMIC_BROKER_CONFIG or
// DYNAMIC_DEFAULT_BROKER_CONFIG, this broker's winning over the default,
// on whichever broker asks (they live on the coordinator); delete brings
// the static value back; keys Kafka cannot change dynamically, per-broker
// keys at the default level, bad values and another broker's id are
// INVALID_REQUEST; the old AlterConfigs replaces a broker's whole set.
func TestDynamicBrokerConfigs(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitBrokers(3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := tc.client()
	defer cl.Close()
	adm := kadm.NewClient(cl)

	describe := func(broker int32, key string) kadm.Config {
		t.Helper()
		rcs, err := adm.DescribeBrokerConfigs(ctx, broker)
		if err != nil {
			t.Fatal(err)
		}
		c, err := rcs.On(fmt.Sprint(broker), nil)
		if err != nil || c.Err != nil {
			t.Fatalf("describe b%d: %v %v", broker, err, c.Err)
		}
		for _, e := range c.Configs {
			if e.Key == key {
				return e
			}
		}
		t.Fatalf("b%d describes no %s", broker, key)
		return kadm.Config{}
	}
	expect := func(broker int32, key, value string, source kmsg.ConfigSource) {
		t.Helper()
		if c := describe(broker, key); c.MaybeValue() != value || c.Source != source {
			t.Fatalf("b%d %s = %q (%v), want %q (%v)", broker, key, c.MaybeValue(), c.Source, value, source)
		}
	}
	alter := func(cfgs []kadm.AlterConfig, brokers ...int32) error {
		t.Helper()
		rs, err := adm.AlterBrokerConfigs(ctx, cfgs, brokers...)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Err != nil {
				return fmt.Errorf("%w: %s", r.Err, r.ErrMessage)
			}
		}
		return nil
	}
	set := func(k, v string) kadm.AlterConfig { return kadm.AlterConfig{Name: k, Value: &v} }

	// sarama's TestFuncAdminIncrementalAlterConfigs.
	expect(1, "log.cleaner.backoff.ms", "15000", kmsg.ConfigSourceDefaultConfig)
	if err := alter([]kadm.AlterConfig{set("log.cleaner.backoff.ms", "15001")}, 1); err != nil {
		t.Fatal(err)
	}
	expect(1, "log.cleaner.backoff.ms", "15001", kmsg.ConfigSourceDynamicBrokerConfig)
	expect(2, "log.cleaner.backoff.ms", "15000", kmsg.ConfigSourceDefaultConfig)

	// The cluster-wide default reaches every broker; a broker's own wins.
	if err := alter([]kadm.AlterConfig{set("log.cleaner.backoff.ms", "20000"), set("min.insync.replicas", "2")}); err != nil {
		t.Fatal(err)
	}
	expect(1, "log.cleaner.backoff.ms", "15001", kmsg.ConfigSourceDynamicBrokerConfig)
	expect(2, "log.cleaner.backoff.ms", "20000", kmsg.ConfigSourceDynamicDefaultBrokerConfig)
	expect(3, "min.insync.replicas", "2", kmsg.ConfigSourceDynamicDefaultBrokerConfig)
	defaults, err := adm.DescribeBrokerConfigs(ctx)
	if err != nil || len(defaults) != 1 || len(defaults[0].Configs) != 2 {
		t.Fatalf("describe the default resource: %v %+v", err, defaults)
	}

	// Delete: back to the default.
	if err := alter([]kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "log.cleaner.backoff.ms"}}, 1); err != nil {
		t.Fatal(err)
	}
	expect(1, "log.cleaner.backoff.ms", "20000", kmsg.ConfigSourceDynamicDefaultBrokerConfig)

	// Refused: INVALID_REQUEST, nothing stored.
	for _, c := range []struct {
		what    string
		cfgs    []kadm.AlterConfig
		brokers []int32
	}{
		{"read-only key", []kadm.AlterConfig{set("log.dirs", "/tmp/x")}, []int32{1}},
		{"read-only Kafka key", []kadm.AlterConfig{set("zookeeper.connect", "x:2181")}, []int32{1}},
		{"per-broker key at the default", []kadm.AlterConfig{set("listeners", "PLAINTEXT://127.0.0.1:1")}, nil},
		{"bad value", []kadm.AlterConfig{set("log.cleaner.backoff.ms", "soon")}, []int32{1}},
		{"bad value of an isrlab key", []kadm.AlterConfig{set("min.insync.replicas", "0")}, nil},
		{"unknown key", []kadm.AlterConfig{set("no.such.config", "1")}, []int32{1}},
	} {
		if err := alter(c.cfgs, c.brokers...); !errors.Is(err, kerr.InvalidRequest) {
			t.Errorf("%s: %v, want INVALID_REQUEST", c.what, err)
		}
	}
	expect(1, "log.dirs", tc.dirs[1], kmsg.ConfigSourceStaticBrokerConfig)
	expect(2, "log.cleaner.backoff.ms", "20000", kmsg.ConfigSourceDynamicDefaultBrokerConfig)

	// Another broker's id, sent to this one: INVALID_REQUEST; read-only
	// is what Kafka cannot change.
	one := wire.NewClient(fmt.Sprintf("127.0.0.1:%d", tc.ports[2]), "brokerconfig-test", nil)
	defer one.Close()
	ia := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeBroker, "1"
	rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	rc.Name, rc.Value = "log.cleaner.backoff.ms", kmsg.StringPtr("1")
	r.Configs = append(r.Configs, rc)
	ia.Resources = append(ia.Resources, r)
	if resp, err := one.Request(ctx, ia); err != nil || resp.(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("b1's config altered on b2: %v %+v", err, resp)
	}
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName, dr.ConfigNames = kmsg.ConfigResourceTypeBroker, "2", []string{"log.cleaner.backoff.ms", "log.dirs", "min.insync.replicas"}
	dc.Resources = append(dc.Resources, dr)
	resp, err := one.Request(ctx, dc)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := map[string]bool{}
	for _, c := range resp.(*kmsg.DescribeConfigsResponse).Resources[0].Configs {
		readOnly[c.Name] = c.ReadOnly
	}
	if want := map[string]bool{"log.cleaner.backoff.ms": false, "log.dirs": true, "min.insync.replicas": false}; fmt.Sprint(readOnly) != fmt.Sprint(want) {
		t.Fatalf("read-only %v, want %v", readOnly, want)
	}

	// The old AlterConfigs replaces broker 1's whole set.
	if err := alter([]kadm.AlterConfig{set("log.cleaner.backoff.ms", "1"), set("num.io.threads", "4")}, 1); err != nil {
		t.Fatal(err)
	}
	if rs, err := adm.AlterBrokerConfigsState(ctx, []kadm.AlterConfig{set("num.io.threads", "6")}, 1); err != nil || rs[0].Err != nil {
		t.Fatalf("AlterConfigs: %v %+v", err, rs)
	}
	expect(1, "num.io.threads", "6", kmsg.ConfigSourceDynamicBrokerConfig)
	expect(1, "log.cleaner.backoff.ms", "20000", kmsg.ConfigSourceDynamicDefaultBrokerConfig)
}
