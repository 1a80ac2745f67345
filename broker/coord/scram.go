package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SCRAM credentials are kept where ZooKeeper-era Kafka keeps them: in a
// user's /config/users/<user> entry, beside its quotas, one config per
// mechanism ("SCRAM-SHA-256": "salt=...,stored_key=...,server_key=...,iterations=4096").
// The coordinator stores those strings; broker/security reads them.

func isScramKey(k string) bool { return strings.HasPrefix(k, "SCRAM-") }

func decodeScram(val []byte) (map[string]string, error) {
	var qj quotaJSON
	if err := json.Unmarshal(val, &qj); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range qj.Config {
		if isScramKey(k) {
			out[k] = v
		}
	}
	return out, nil
}

func userKey(user string) string { return "/config/users/" + url.QueryEscape(user) }

// ScramCredentials returns the stored SCRAM credentials of every user
// that has one: user -> mechanism -> stored credential.
func (c *Client) ScramCredentials(ctx context.Context) (map[string]map[string]string, error) {
	const op = "read SCRAM credentials"
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, "/config/users/", clientv3.WithPrefix())
	if err != nil {
		return nil, wrapErr(op, err)
	}
	out := map[string]map[string]string{}
	for _, kv := range resp.Kvs {
		raw := strings.TrimPrefix(string(kv.Key), "/config/users/")
		if strings.Contains(raw, "/") || raw == quotaDefault {
			continue // a user+client-id quota, or the default user's
		}
		user, err := url.QueryUnescape(raw)
		if err != nil {
			continue
		}
		m, err := decodeScram(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", op, kv.Key, err)
		}
		if len(m) > 0 {
			out[user] = m
		}
	}
	return out, nil
}

// UserScramCredentials returns one user's stored credentials by mechanism.
func (c *Client) UserScramCredentials(ctx context.Context, user string) (map[string]string, error) {
	op := "read SCRAM credentials of a user"
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, userKey(user))
	if err != nil {
		return nil, wrapErr(op, err)
	}
	if len(resp.Kvs) == 0 {
		return map[string]string{}, nil
	}
	return decodeScram(resp.Kvs[0].Value)
}

// AlterScramCredentials sets and removes a user's credentials by
// mechanism with a compare-and-swap on the user's entry (retried when
// another writer won), keeping its quotas; the entry is deleted when
// nothing is left in it.
func (c *Client) AlterScramCredentials(ctx context.Context, user string, set map[string]string, remove []string) error {
	const op = "alter SCRAM credentials"
	decode := func(v []byte) (map[string]string, error) {
		var qj quotaJSON
		if err := json.Unmarshal(v, &qj); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if qj.Config == nil {
			qj.Config = map[string]string{}
		}
		return qj.Config, nil
	}
	return c.updateEntity(ctx, userKey(user), op, decode, func(cur map[string]string) (map[string]string, error) {
		for k, v := range set {
			cur[k] = v
		}
		for _, k := range remove {
			delete(cur, k)
		}
		return cur, nil
	})
}
