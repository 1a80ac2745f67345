package clients

import (
	"encoding"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"

	"github.com/isrlab/isrlab/workloads"
)

// saramaOwned are the settings the driver needs as they are: a scenario
// may not change them.
var saramaOwned = []string{
	"Producer.Return.Successes", "Producer.Return.Errors", "Producer.Partitioner",
	"Consumer.Return.Errors", "Consumer.Offsets.AutoCommit", "Net.Proxy", "Net.TLS", "Net.SASL", "MetricRegistry",
	"Producer.Transaction.ID",
}

// saramaConfig is the sarama configuration of a workload: sarama's
// defaults, then the workload's Kafka-named keys mapped to sarama's
// fields, then own (sarama's field paths, e.g. Producer.Idempotent,
// Net.MaxOpenRequests, Version), then what the driver needs, checked by
// sarama's own Config.Validate.
//
//	acks                                    Producer.RequiredAcks (all: WaitForAll, 1: WaitForLocal, 0: NoResponse)
//	enable.idempotence                      Producer.Idempotent, and Net.MaxOpenRequests 1 (sarama requires it)
//	retries                                 Producer.Retry.Max (-1: 0; 0, until delivery.timeout: delivery.timeout / Producer.Retry.Backoff)
//	max.in.flight.requests.per.connection   Net.MaxOpenRequests
//	request.timeout                         Producer.Timeout, Net.ReadTimeout, Net.WriteTimeout, Net.DialTimeout
//	linger                                  Producer.Flush.Frequency
//	delivery.timeout                        (sarama has none: the driver waits this long for a send's outcome)
func saramaConfig(cfg workloads.Config, own map[string]string) (*sarama.Config, error) {
	cfg = cfg.WithDefaults()
	c := sarama.NewConfig()
	c.ClientID = "isrlab"
	req, delivery := cfg.RequestTimeout, cfg.DeliveryTimeout
	switch cfg.Acks {
	case "1":
		c.Producer.RequiredAcks = sarama.WaitForLocal
	case "0":
		c.Producer.RequiredAcks = sarama.NoResponse
	default:
		c.Producer.RequiredAcks = sarama.WaitForAll
	}
	if cfg.Idempotent {
		c.Producer.Idempotent = true
		c.Net.MaxOpenRequests = 1
	}
	if cfg.MaxInFlight > 0 {
		c.Net.MaxOpenRequests = cfg.MaxInFlight // more than 1 with idempotence: sarama refuses it below
	}
	switch {
	case cfg.Retries < 0:
		c.Producer.Retry.Max = 0
	case cfg.Retries > 0:
		c.Producer.Retry.Max = cfg.Retries
	default:
		c.Producer.Retry.Max = max(1, int(delivery/c.Producer.Retry.Backoff))
	}
	c.Producer.Timeout = req
	c.Net.ReadTimeout, c.Net.WriteTimeout, c.Net.DialTimeout = req, req, req
	c.Producer.Flush.Frequency = cfg.Linger
	c.Consumer.MaxWaitTime = max(cfg.PollTimeout/2, 10*time.Millisecond)
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	for _, k := range slices.Sorted(maps.Keys(own)) {
		if err := setOwn(reflect.ValueOf(c).Elem(), "sarama.Config", k, own[k], saramaOwned); err != nil {
			return nil, fmt.Errorf("client sarama: client.config.%s: %w", k, err)
		}
	}
	c.Producer.Return.Successes, c.Producer.Return.Errors = true, true
	c.Producer.Partitioner = sarama.NewManualPartitioner
	c.Consumer.Return.Errors = true
	if err := c.Validate(); err != nil {
		reason := err.Error()
		var ce sarama.ConfigurationError
		if errors.As(err, &ce) {
			reason = string(ce)
		}
		return nil, &workloads.CapabilityError{Client: Sarama, Reason: reason}
	}
	return c, nil
}

// checkSaramaGroup checks the sarama configuration of the queue
// workload's group members (sarama.NewConsumerGroup's own check on top
// of Config.Validate's).
func checkSaramaGroup(cfg workloads.Config, own map[string]string) error {
	c, err := saramaConfig(cfg, own)
	if err != nil {
		return err
	}
	if !c.Version.IsAtLeast(sarama.V0_10_2_0) {
		return &workloads.CapabilityError{Client: Sarama, Reason: "consumer groups (the queue workload) need Version 0.10.2 or later"}
	}
	return nil
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	versionType  = reflect.TypeFor[sarama.KafkaVersion]()
	unmarshaler  = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// setOwn sets the field of the struct v (named what, for errors) at path
// (the client's own field names, dot-separated) from its text, unless
// owned (paths the driver sets) holds it: booleans, integers, durations
// (100ms), numbers, strings, sarama's Version (2.8.0) and the types that
// parse text (sarama's CompressionCodec).
func setOwn(v reflect.Value, what, path, text string, owned []string) error {
	for _, o := range owned {
		if path == o || strings.HasPrefix(path, o+".") {
			return fmt.Errorf("set by the driver (%s)", o)
		}
	}
	for i, name := range strings.Split(path, ".") {
		if v.Kind() != reflect.Struct {
			return fmt.Errorf("%s is not a group of settings", strings.Join(strings.Split(path, ".")[:i], "."))
		}
		f, ok := v.Type().FieldByName(name)
		if !ok || !f.IsExported() || len(f.Index) != 1 {
			return fmt.Errorf("%s has no %s%s", what, path, nearestField(v.Type(), name))
		}
		v = v.Field(f.Index[0])
	}
	switch {
	case v.Type() == versionType:
		ver, err := sarama.ParseKafkaVersion(text)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(ver))
		return nil
	case v.Type() == durationType:
		d, err := time.ParseDuration(text)
		if err != nil {
			return fmt.Errorf("%q is not a duration like 100ms", text)
		}
		v.SetInt(int64(d))
		return nil
	case reflect.PointerTo(v.Type()).Implements(unmarshaler):
		return v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(text))
	}
	switch v.Kind() {
	case reflect.Bool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return fmt.Errorf("%q is not true or false", text)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeFor[sarama.RequiredAcks]() || v.Type() == reflect.TypeFor[kafka.RequiredAcks]() {
			switch text {
			case "all", "WaitForAll":
				text = "-1"
			case "WaitForLocal":
				text = "1"
			case "NoResponse":
				text = "0"
			}
		}
		n, err := strconv.ParseInt(text, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%q is not an integer of %d bits", text, v.Type().Bits())
		}
		v.SetInt(n)
	case reflect.Float32, reflect.Float64:
		x, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", text)
		}
		v.SetFloat(x)
	case reflect.String:
		v.SetString(text)
	default:
		return fmt.Errorf("a %s cannot be set from a scenario", v.Type())
	}
	return nil
}

// nearestField suggests a field of t whose name matches name but for
// case, or lists t's fields.
func nearestField(t reflect.Type, name string) string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if l, n := strings.ToLower(f.Name), strings.ToLower(name); strings.HasPrefix(l, n) || strings.HasPrefix(n, l) {
			return fmt.Sprintf(" (did you mean %s?)", f.Name)
		}
		names = append(names, f.Name)
	}
	return fmt.Sprintf(" (here: %s)", strings.Join(names, ", "))
}
