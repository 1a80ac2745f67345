package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Client quota entity types (Kafka's ClientQuotaEntity).
const (
	QuotaUser     = "user"
	QuotaClientID = "client-id"
	QuotaIP       = "ip"
)

// quotaDefault is how Kafka names an entity type's default in its paths.
const quotaDefault = "<default>"

// ErrBadQuotaEntity: the entity combination is not one Kafka stores
// (user, client-id, user+client-id or ip, each at most once).
var ErrBadQuotaEntity = errors.New("invalid client quota entity")

// QuotaEntityPart is one component of a quota entity: a type with a name,
// or the type's default (Name empty).
type QuotaEntityPart struct {
	Type    string `json:"type"`
	Name    string `json:"name,omitempty"`
	Default bool   `json:"default,omitempty"`
}

// ClientQuota is the quota values of one entity.
type ClientQuota struct {
	Entity []QuotaEntityPart
	Values map[string]float64
}

// quotaJSON is Kafka's /config/<entity> format.
type quotaJSON struct {
	Version int               `json:"version"`
	Config  map[string]string `json:"config"`
}

// quotaKey is the entity's path, as Kafka's ZooKeeper layout has it:
// /config/users/<u>, /config/clients/<c>, /config/users/<u>/clients/<c>,
// /config/ips/<ip>; names are URL-escaped, defaults are <default>.
func quotaKey(entity []QuotaEntityPart) (string, error) {
	var user, client, ip *QuotaEntityPart
	for i := range entity {
		e := &entity[i]
		slot := map[string]**QuotaEntityPart{QuotaUser: &user, QuotaClientID: &client, QuotaIP: &ip}[e.Type]
		if slot == nil {
			return "", fmt.Errorf("%w: unknown entity type %q", ErrBadQuotaEntity, e.Type)
		}
		if *slot != nil {
			return "", fmt.Errorf("%w: entity type %q given twice", ErrBadQuotaEntity, e.Type)
		}
		*slot = e
	}
	name := func(e *QuotaEntityPart) string {
		if e.Default {
			return quotaDefault
		}
		return url.QueryEscape(e.Name)
	}
	switch {
	case ip != nil && (user != nil || client != nil):
		return "", fmt.Errorf("%w: ip quotas cannot be combined with user or client-id", ErrBadQuotaEntity)
	case ip != nil:
		return "/config/ips/" + name(ip), nil
	case user != nil && client != nil:
		return "/config/users/" + name(user) + "/clients/" + name(client), nil
	case user != nil:
		return "/config/users/" + name(user), nil
	case client != nil:
		return "/config/clients/" + name(client), nil
	}
	return "", fmt.Errorf("%w: empty entity", ErrBadQuotaEntity)
}

// entityFromKey is quotaKey's inverse; ok is false for keys that are not
// quota entities.
func entityFromKey(k string) ([]QuotaEntityPart, bool) {
	part := func(typ, raw string) (QuotaEntityPart, bool) {
		if raw == "" {
			return QuotaEntityPart{}, false
		}
		if raw == quotaDefault {
			return QuotaEntityPart{Type: typ, Default: true}, true
		}
		n, err := url.QueryUnescape(raw)
		return QuotaEntityPart{Type: typ, Name: n}, err == nil
	}
	segs := strings.Split(strings.TrimPrefix(k, "/config/"), "/")
	switch {
	case len(segs) == 2 && segs[0] == "ips":
		p, ok := part(QuotaIP, segs[1])
		return []QuotaEntityPart{p}, ok
	case len(segs) == 2 && segs[0] == "clients":
		p, ok := part(QuotaClientID, segs[1])
		return []QuotaEntityPart{p}, ok
	case len(segs) == 2 && segs[0] == "users":
		p, ok := part(QuotaUser, segs[1])
		return []QuotaEntityPart{p}, ok
	case len(segs) == 4 && segs[0] == "users" && segs[2] == "clients":
		u, ok1 := part(QuotaUser, segs[1])
		c, ok2 := part(QuotaClientID, segs[3])
		return []QuotaEntityPart{u, c}, ok1 && ok2
	}
	return nil, false
}

// ClientQuotas reads every stored client quota, ordered by path.
func (c *Client) ClientQuotas(ctx context.Context) ([]ClientQuota, error) {
	const op = "read client quotas"
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).Then(
		clientv3.OpGet("/config/users/", clientv3.WithPrefix()),
		clientv3.OpGet("/config/clients/", clientv3.WithPrefix()),
		clientv3.OpGet("/config/ips/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, wrapErr(op, err)
	}
	type keyed struct {
		key string
		q   ClientQuota
	}
	var all []keyed
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			entity, ok := entityFromKey(string(kv.Key))
			if !ok {
				continue
			}
			vals, err := decodeQuota(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", op, kv.Key, err)
			}
			if len(vals) == 0 {
				continue // only a SCRAM credential
			}
			all = append(all, keyed{string(kv.Key), ClientQuota{Entity: entity, Values: vals}})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].key < all[j].key })
	out := make([]ClientQuota, len(all))
	for i, k := range all {
		out[i] = k.q
	}
	return out, nil
}

func decodeQuota(val []byte) (map[string]float64, error) {
	var qj quotaJSON
	if err := json.Unmarshal(val, &qj); err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(qj.Config))
	for k, v := range qj.Config {
		if isScramKey(k) {
			continue // a user's SCRAM credential lives in the same entry
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("quota %s=%q: %w", k, v, err)
		}
		out[k] = f
	}
	return out, nil
}

// AlterClientQuota sets and removes quota values of one entity with a
// compare-and-swap on its key (retried when another writer won), deleting
// the key when no value is left, as kafka-configs --alter does.
func (c *Client) AlterClientQuota(ctx context.Context, entity []QuotaEntityPart, set map[string]float64, remove []string) error {
	key, err := quotaKey(entity)
	if err != nil {
		return err
	}
	op := "alter client quota " + key
	for attempt := 0; ; attempt++ {
		cctx, cancel := c.callCtx(ctx)
		resp, err := c.cli.Get(cctx, key)
		cancel()
		if err != nil {
			return wrapErr(op, err)
		}
		vals := map[string]float64{}
		var rev int64
		var scram map[string]string
		if len(resp.Kvs) > 0 {
			rev = resp.Kvs[0].ModRevision
			if vals, err = decodeQuota(resp.Kvs[0].Value); err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
			if scram, err = decodeScram(resp.Kvs[0].Value); err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
		}
		for k, v := range set {
			vals[k] = v
		}
		for _, k := range remove {
			delete(vals, k)
		}
		var write clientv3.Op
		if len(vals) == 0 && len(scram) == 0 {
			write = clientv3.OpDelete(key)
		} else {
			qj := quotaJSON{Version: 1, Config: map[string]string{}}
			for k, v := range vals {
				qj.Config[k] = strconv.FormatFloat(v, 'f', -1, 64)
			}
			for k, v := range scram {
				qj.Config[k] = v
			}
			b, err := json.Marshal(qj)
			if err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
			write = clientv3.OpPut(key, string(b))
		}
		cctx, cancel = c.callCtx(ctx)
		tr, err := c.cli.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(write).Commit()
		cancel()
		if err != nil {
			return wrapErr(op, err)
		}
		if tr.Succeeded {
			return nil
		}
		if attempt >= 10 {
			return fmt.Errorf("%s: %w", op, ErrTopicChanged)
		}
	}
}
