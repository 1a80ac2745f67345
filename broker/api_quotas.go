package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
)

// Client quotas (KIP-546) are stored and reported, not enforced: a
// clustered broker keeps them in the coordinator where ZooKeeper-era Kafka
// kept them (/config/users, /config/clients, /config/ips); a standalone
// broker keeps them in memory until it stops.

// quotaKeys are Kafka's quota configs (QuotaConfigs) with whether the
// value must be whole (LONG and INT configs).
var quotaKeys = map[string]struct {
	ip    bool // an ip entity's key, not a user/client-id one
	whole bool
}{
	"producer_byte_rate":       {whole: true},
	"consumer_byte_rate":       {whole: true},
	"request_percentage":       {},
	"controller_mutation_rate": {},
	"connection_creation_rate": {ip: true, whole: true},
}

// quotaStore keeps client quotas: the coordinator in a cluster
// (*coord.Client), localQuotas standalone.
type quotaStore interface {
	ClientQuotas(ctx context.Context) ([]coord.ClientQuota, error)
	AlterClientQuota(ctx context.Context, entity []coord.QuotaEntityPart, set map[string]float64, remove []string) error
}

// quotaAPI answers DescribeClientQuotas and AlterClientQuotas from a
// quotaStore.
type quotaAPI struct{ store quotaStore }

var quotaHandler = handlerOn(func(b *Broker) *quotaAPI { return b.api.quotas })

// localQuotas is a standalone broker's quota store.
type localQuotas struct {
	mu sync.Mutex
	m  map[string]coord.ClientQuota
}

func entityString(e []coord.QuotaEntityPart) string {
	parts := make([]string, 0, len(e))
	for _, p := range e {
		n := "=" + p.Name
		if p.Default {
			n = "<default>"
		}
		parts = append(parts, p.Type+n)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// ClientQuotas returns the quotas, ordered by entity.
func (q *localQuotas) ClientQuotas(context.Context) ([]coord.ClientQuota, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []coord.ClientQuota
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range q.m {
			if !yield(k) {
				return
			}
		}
	}) {
		out = append(out, q.m[k])
	}
	return out, nil
}

// AlterClientQuota sets and removes an entity's quota values; an entity
// left without values is dropped.
func (q *localQuotas) AlterClientQuota(_ context.Context, entity []coord.QuotaEntityPart, set map[string]float64, remove []string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := entityString(entity)
	cur, ok := q.m[k]
	if !ok {
		cur = coord.ClientQuota{Entity: entity, Values: map[string]float64{}}
	}
	for key, v := range set {
		cur.Values[key] = v
	}
	for _, key := range remove {
		delete(cur.Values, key)
	}
	if len(cur.Values) == 0 {
		delete(q.m, k)
	} else {
		q.m[k] = cur
	}
	return nil
}

// quotaEntity converts a request's entity, checking it as Kafka does.
func quotaEntity(types []string, names []*string) ([]coord.QuotaEntityPart, error) {
	if len(types) == 0 {
		return nil, errors.New("Invalid empty client quota entity")
	}
	var out []coord.QuotaEntityPart
	seen := map[string]bool{}
	for i, typ := range types {
		switch typ {
		case coord.QuotaUser, coord.QuotaClientID, coord.QuotaIP:
		default:
			return nil, fmt.Errorf("Unhandled client quota entity type: %s", typ)
		}
		if seen[typ] {
			return nil, fmt.Errorf("Duplicate %s entity type", typ)
		}
		seen[typ] = true
		p := coord.QuotaEntityPart{Type: typ, Default: names[i] == nil}
		if names[i] != nil {
			p.Name = *names[i]
		}
		out = append(out, p)
	}
	if seen[coord.QuotaIP] && len(out) > 1 {
		return nil, errors.New("Invalid quota entity combination")
	}
	return out, nil
}

var _ = serve(48, "DescribeClientQuotas", 0, 1, quotaHandler((*quotaAPI).handleDescribeClientQuotas), notIn("0.10", "2.4"), in("2.6", 0, 0), k40(0, 1))

// handleDescribeClientQuotas returns the stored quotas whose entities match
// every filter component (exact name, the type's default, or any); with
// strict set an entity may have no type the filter does not name.
func (a *quotaAPI) handleDescribeClientQuotas(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.DescribeClientQuotasRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	fail := func(e *kerr.Error, msg string) {
		resp.ErrorCode, resp.ErrorMessage = e.Code, &msg
		rq.respond(resp)
	}
	seen := map[string]bool{}
	for _, c := range req.Components {
		switch c.EntityType {
		case coord.QuotaUser, coord.QuotaClientID, coord.QuotaIP:
		default:
			fail(kerr.InvalidRequest, "Custom entity type '"+c.EntityType+"' not supported")
			return
		}
		if seen[c.EntityType] {
			fail(kerr.InvalidRequest, "Duplicate "+c.EntityType+" filter component entity type")
			return
		}
		seen[c.EntityType] = true
		if c.MatchType == 0 && c.Match == nil {
			fail(kerr.InvalidRequest, "Unspecified match for an exact match filter component")
			return
		}
		if c.MatchType > 2 {
			fail(kerr.InvalidRequest, fmt.Sprintf("Unknown match type %d", c.MatchType))
			return
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	all, err := a.store.ClientQuotas(ctx)
	if err != nil {
		fail(kerr.UnknownServerError, err.Error())
		return
	}
	for _, q := range all {
		if !quotaMatches(q.Entity, req.Components, req.Strict) {
			continue
		}
		e := kmsg.NewDescribeClientQuotasResponseEntry()
		for _, p := range q.Entity {
			ee := kmsg.NewDescribeClientQuotasResponseEntryEntity()
			ee.Type = p.Type
			if !p.Default {
				ee.Name = kmsg.StringPtr(p.Name)
			}
			e.Entity = append(e.Entity, ee)
		}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range q.Values {
				if !yield(k) {
					return
				}
			}
		}) {
			v := kmsg.NewDescribeClientQuotasResponseEntryValue()
			v.Key, v.Value = k, q.Values[k]
			e.Values = append(e.Values, v)
		}
		resp.Entries = append(resp.Entries, e)
	}
	rq.respond(resp)
}

func quotaMatches(entity []coord.QuotaEntityPart, filter []kmsg.DescribeClientQuotasRequestComponent, strict bool) bool {
	if strict && len(entity) != len(filter) {
		return false
	}
	for _, c := range filter {
		i := slices.IndexFunc(entity, func(p coord.QuotaEntityPart) bool { return p.Type == c.EntityType })
		if i < 0 {
			return false
		}
		p := entity[i]
		switch c.MatchType {
		case 0:
			if p.Default || p.Name != *c.Match {
				return false
			}
		case 1:
			if !p.Default {
				return false
			}
		}
	}
	return true
}

var _ = serve(49, "AlterClientQuotas", 0, 1, quotaHandler((*quotaAPI).handleAlterClientQuotas), notIn("0.10", "2.4"), in("2.6", 0, 0), k40(0, 1))

// handleAlterClientQuotas sets and removes quota values per entity, each
// entry checked on its own (entity shape, known keys, whole numbers where
// Kafka's config is a LONG or INT).
func (a *quotaAPI) handleAlterClientQuotas(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.AlterClientQuotasRequest)
	resp := req.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, re := range req.Entries {
		out := kmsg.NewAlterClientQuotasResponseEntry()
		var types []string
		var names []*string
		for _, e := range re.Entity {
			oe := kmsg.NewAlterClientQuotasResponseEntryEntity()
			oe.Type, oe.Name = e.Type, e.Name
			out.Entity = append(out.Entity, oe)
			types, names = append(types, e.Type), append(names, e.Name)
		}
		fail := func(e *kerr.Error, msg string) { out.ErrorCode, out.ErrorMessage = e.Code, &msg }
		entity, err := quotaEntity(types, names)
		if err != nil {
			fail(kerr.InvalidRequest, err.Error())
			resp.Entries = append(resp.Entries, out)
			continue
		}
		ip := entity[0].Type == coord.QuotaIP
		set := map[string]float64{}
		var remove []string
		bad := ""
		for _, op := range re.Ops {
			k, ok := quotaKeys[op.Key]
			switch {
			case !ok || k.ip != ip:
				bad = "Invalid configuration key " + op.Key
			case op.Remove:
				remove = append(remove, op.Key)
			case k.whole && op.Value != math.Trunc(op.Value):
				bad = fmt.Sprintf("Configuration %s must be a Long value", op.Key)
			case op.Value <= 0:
				bad = fmt.Sprintf("Configuration %s must be positive", op.Key)
			default:
				set[op.Key] = op.Value
			}
		}
		switch {
		case bad != "":
			fail(kerr.InvalidRequest, bad)
		case req.ValidateOnly:
		default:
			if err := a.store.AlterClientQuota(ctx, entity, set, remove); err != nil {
				fail(kerr.UnknownServerError, err.Error())
			}
		}
		resp.Entries = append(resp.Entries, out)
	}
	rq.respond(resp)
}
