package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/isrlab/isrlab/kafkaconfig"
)

// dynamicConfigs are the dynamic broker configs (Kafka's
// DynamicBrokerConfig): this broker's own (a BROKER resource named by its
// id) and the cluster-wide defaults (the empty name). In a cluster they
// live on the coordinator, at Kafka's ZooKeeper paths /config/brokers/<id>
// and /config/brokers/<default>, and are read from there for each
// DescribeConfigs (these fields keep the last read, answered when the
// coordinator does not); a standalone broker keeps them here.
//
// They are stored and described, not applied: the broker keeps running
// with its static configs (docs/compatibility.md), except a listener's
// keystore (listener.name.<l>.ssl.keystore.location), which the broker
// the update is for reads and serves at once.
type dynamicConfigs struct {
	mu        sync.Mutex
	perBroker map[string]string
	defaults  map[string]string
}

// brokerResourceID reads a BROKER resource's name as Kafka's
// ZkAdminManager.getBrokerId does: empty is the cluster-wide default
// (nil), else it must be this broker's id.
func (a *configAPI) brokerResourceID(name string) (*int32, error) {
	if name == "" {
		return nil, nil
	}
	id, err := strconv.ParseInt(name, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("broker id must be an integer, but it is: %s", name)
	}
	if int32(id) != a.id {
		return nil, fmt.Errorf("unexpected broker id, expected %d, but received %s", a.id, name)
	}
	me := a.id
	return &me, nil
}

// dynamicBrokerConfigs returns this broker's dynamic configs and the
// cluster-wide dynamic defaults.
func (a *configAPI) dynamicBrokerConfigs(ctx context.Context) (perBroker, defaults map[string]string) {
	d := &a.dynamic
	if a.coord != nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		me := a.id
		pb, err1 := a.coord.BrokerConfig(ctx, &me)
		df, err2 := a.coord.BrokerConfig(ctx, nil)
		d.mu.Lock()
		if err1 == nil {
			d.perBroker = pb
		}
		if err2 == nil {
			d.defaults = df
		}
		d.mu.Unlock()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.perBroker), maps.Clone(d.defaults)
}

// errValidateOnly ends an update that only validates.
var errValidateOnly = errors.New("validate only")

// alterBrokerConfigs changes the dynamic configs of a BROKER resource to
// what next makes of the current ones, after checking them as Kafka's
// DynamicBrokerConfig.validate does; with validateOnly nothing is
// written. Kafka answers a refused or malformed config with
// INVALID_REQUEST (ZkAdminManager turns the ConfigException into an
// InvalidRequestException), and so does this.
func (a *configAPI) alterBrokerConfigs(ctx context.Context, name string, validateOnly bool, next func(current map[string]string) (map[string]string, error)) (*kerr.Error, string) {
	id, err := a.brokerResourceID(name)
	if err != nil {
		return kerr.InvalidRequest, err.Error()
	}
	var stored map[string]string
	update := func(cur map[string]string) (map[string]string, error) {
		c := maps.Clone(cur)
		if c == nil {
			c = map[string]string{} // nothing set yet: the ops add to an empty map
		}
		n, err := next(c)
		if err != nil {
			return nil, err
		}
		if err := a.cfg.ValidateDynamicBrokerConfigs(n, id != nil); err != nil {
			return nil, invalidDynamicConfig{fmt.Errorf("invalid config value for resource BROKER %q: %w", name, err)}
		}
		// A listener's keystore is read when it is set, even to the same
		// path (Kafka reloads a keystore file that changed), and refused
		// if it cannot serve; it is applied once the update is stored.
		for k, loc := range n {
			if l, ok := kafkaconfig.ListenerKeystoreKey(k); ok && a.reloadKeystore != nil {
				if err := a.reloadKeystore(l, loc, false); err != nil {
					return nil, invalidDynamicConfig{fmt.Errorf("invalid config value for resource BROKER %q: %s: %w", name, k, err)}
				}
			}
		}
		if validateOnly {
			return nil, errValidateOnly
		}
		stored = n
		return n, nil
	}
	if a.coord != nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err = a.coord.UpdateBrokerConfig(ctx, id, update)
	} else {
		d := &a.dynamic
		d.mu.Lock()
		slot := &d.defaults
		if id != nil {
			slot = &d.perBroker
		}
		var n map[string]string
		if n, err = update(*slot); err == nil {
			*slot = n
		}
		d.mu.Unlock()
	}
	if err == nil {
		for k, loc := range stored {
			if l, ok := kafkaconfig.ListenerKeystoreKey(k); ok && a.reloadKeystore != nil {
				if rerr := a.reloadKeystore(l, loc, true); rerr != nil {
					return kerr.InvalidRequest, rerr.Error()
				}
			}
		}
	}
	var ke *kerr.Error
	var bad invalidDynamicConfig
	switch {
	case err == nil, errors.Is(err, errValidateOnly):
		return nil, ""
	case errors.As(err, &ke):
		return ke, err.Error()
	case errors.As(err, &bad):
		return kerr.InvalidRequest, err.Error()
	}
	return kerr.UnknownServerError, err.Error() // the coordinator did not take it
}

// invalidDynamicConfig is a refused config or operation: INVALID_REQUEST.
type invalidDynamicConfig struct{ error }
