package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/security"
)

// SaslHandshake and SaslAuthenticate reach these handlers only when the
// connection's SASL session did not take them (security.Session.Step):
// on a listener without SASL, or SaslAuthenticate after authentication.
// Kafka's KafkaApis answers both with ILLEGAL_SASL_STATE.
var (
	_ = serve(17, "SaslHandshake", 0, 1, handleSaslHandshake, in("0.10", 0, 0), k40(0, 1))
	_ = serve(36, "SaslAuthenticate", 0, 2, handleSaslAuthenticate, notIn("0.10"), in("2.4", 0, 1), k40(0, 2))
)

// keySaslAuthenticate is SaslAuthenticate's API key.
const keySaslAuthenticate = 36

func handleSaslHandshake(_ *Broker, _ context.Context, rq *request) {
	resp := rq.req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.ErrorCode = kerr.IllegalSaslState.Code
	resp.SupportedMechanisms = []string{}
	rq.respond(resp)
}

func handleSaslAuthenticate(_ *Broker, _ context.Context, rq *request) {
	resp := rq.req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	resp.ErrorCode = kerr.IllegalSaslState.Code
	msg := "SaslAuthenticate request received after successful authentication"
	resp.ErrorMessage, resp.SASLAuthBytes = &msg, []byte{}
	rq.respond(resp)
}

// SCRAM credentials (KIP-554): DescribeUserScramCredentials and
// AlterUserScramCredentials, served by Kafka from 2.7.
var (
	_ = serve(50, "DescribeUserScramCredentials", 0, 0, scramHandler((*scramAPI).handleDescribe), notIn("0.10", "2.4", "2.6"), k40(0, 0))
	_ = serve(51, "AlterUserScramCredentials", 0, 0, scramHandler((*scramAPI).handleAlter), notIn("0.10", "2.4", "2.6"), k40(0, 0))
)

var scramHandler = handlerOn(func(b *Broker) *scramAPI { return b.api.scram })

// scramStore keeps SCRAM credentials as Kafka's stored strings: the
// coordinator in a cluster (*coord.Client), localScram standalone.
type scramStore interface {
	ScramCredentials(ctx context.Context) (map[string]map[string]string, error)
	UserScramCredentials(ctx context.Context, user string) (map[string]string, error)
	AlterScramCredentials(ctx context.Context, user string, set map[string]string, remove []string) error
}

// scramAPI answers the SCRAM credential APIs and looks credentials up
// for SASL sessions (security.Credentials).
type scramAPI struct{ store scramStore }

// ScramCredential returns user's credential for mechanism.
func (a *scramAPI) ScramCredential(ctx context.Context, mechanism, user string) (security.ScramCredential, bool, error) {
	m, err := a.store.UserScramCredentials(ctx, user)
	if err != nil {
		return security.ScramCredential{}, false, err
	}
	s, ok := m[mechanism]
	if !ok {
		return security.ScramCredential{}, false, nil
	}
	c, err := security.ParseScramCredential(s)
	if err != nil {
		return security.ScramCredential{}, false, fmt.Errorf("stored credential of a user: %w", err)
	}
	return c, true, nil
}

// scramMechanisms are KIP-554's mechanism codes.
var scramMechanisms = map[int8]string{1: security.ScramSHA256, 2: security.ScramSHA512}

func scramCode(mech string) int8 {
	for k, v := range scramMechanisms {
		if v == mech {
			return k
		}
	}
	return 0
}

func (a *scramAPI) handleDescribe(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	all, err := a.store.ScramCredentials(cctx)
	if err != nil {
		resp.ErrorCode = kerr.UnknownServerError.Code
		msg := err.Error()
		resp.ErrorMessage = &msg
		rq.respond(resp)
		return
	}
	users := slices.Sorted(maps.Keys(all))
	counts := map[string]int{}
	if len(req.Users) > 0 {
		users = users[:0]
		for _, u := range req.Users {
			if counts[u.Name]++; counts[u.Name] == 1 {
				users = append(users, u.Name)
			}
		}
	}
	for _, u := range users {
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = u
		creds, ok := all[u]
		switch {
		case counts[u] > 1:
			r.ErrorCode = kerr.DuplicateResource.Code
			msg := "Cannot describe SCRAM credentials for the same user twice in a single request: " + u
			r.ErrorMessage = &msg
		case !ok:
			r.ErrorCode = kerr.ResourceNotFound.Code
			msg := "Attempt to describe a user credential that does not exist: " + u
			r.ErrorMessage = &msg
		default:
			for _, m := range slices.Sorted(maps.Keys(creds)) {
				c, err := security.ParseScramCredential(creds[m])
				if err != nil || scramCode(m) == 0 {
					continue
				}
				ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
				ci.Mechanism, ci.Iterations = scramCode(m), int32(c.Iterations)
				r.CredentialInfos = append(r.CredentialInfos, ci)
			}
		}
		resp.Results = append(resp.Results, r)
	}
	rq.respond(resp)
}

// handleAlter applies deletions and upsertions user by user, with
// Kafka's checks (ZkAdminManager.alterUserScramCredentials): a user's
// changes all fail if one of them is invalid.
func (a *scramAPI) handleAlter(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	type change struct {
		set    map[string]string
		remove []string
		code   int16
		msg    string
	}
	changes := map[string]*change{}
	var order []string
	get := func(u string) *change {
		c, ok := changes[u]
		if !ok {
			c = &change{set: map[string]string{}}
			changes[u] = c
			order = append(order, u)
		}
		return c
	}
	seen := map[[2]string]bool{}
	failf := func(c *change, e *kerr.Error, format string, args ...any) {
		if c.code == 0 {
			c.code, c.msg = e.Code, fmt.Sprintf(format, args...)
		}
	}
	for _, d := range req.Deletions {
		c := get(d.Name)
		mech, ok := scramMechanisms[d.Mechanism]
		switch {
		case d.Name == "":
			failf(c, kerr.UnacceptableCredential, "Username must not be empty")
		case !ok:
			failf(c, kerr.UnsupportedSaslMechanism, "Unknown SCRAM mechanism")
		case seen[[2]string{d.Name, mech}]:
			failf(c, kerr.DuplicateResource, "A user credential cannot be altered twice in the same request")
		}
		seen[[2]string{d.Name, mech}] = true
		c.remove = append(c.remove, mech)
	}
	for _, up := range req.Upsertions {
		c := get(up.Name)
		mech, ok := scramMechanisms[up.Mechanism]
		switch {
		case up.Name == "":
			failf(c, kerr.UnacceptableCredential, "Username must not be empty")
		case !ok:
			failf(c, kerr.UnsupportedSaslMechanism, "Unknown SCRAM mechanism")
		case seen[[2]string{up.Name, mech}]:
			failf(c, kerr.DuplicateResource, "A user credential cannot be altered twice in the same request")
		case up.Iterations < security.MinScramIterations:
			failf(c, kerr.UnacceptableCredential, "Too few iterations")
		case up.Iterations > security.MaxScramIterations:
			failf(c, kerr.UnacceptableCredential, "Too many iterations")
		case len(up.Salt) == 0 || len(up.SaltedPassword) == 0:
			failf(c, kerr.UnacceptableCredential, "Salt and salted password must not be empty")
		}
		seen[[2]string{up.Name, mech}] = true
		if c.code != 0 {
			continue
		}
		cred, err := security.CredentialFromSalted(mech, up.Salt, up.SaltedPassword, int(up.Iterations))
		if err != nil {
			failf(c, kerr.UnsupportedSaslMechanism, "Unknown SCRAM mechanism")
			continue
		}
		c.set[mech] = cred.String()
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, u := range order {
		c := changes[u]
		r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		r.User = u
		if c.code == 0 && len(c.remove) > 0 {
			cur, err := a.store.UserScramCredentials(cctx, u)
			if err != nil {
				c.code, c.msg = kerr.UnknownServerError.Code, err.Error()
			}
			for _, m := range c.remove {
				if _, ok := cur[m]; !ok && c.code == 0 {
					c.code, c.msg = kerr.ResourceNotFound.Code, "Attempt to delete a user credential that does not exist"
				}
			}
		}
		if c.code == 0 {
			if err := a.store.AlterScramCredentials(cctx, u, c.set, c.remove); err != nil {
				c.code, c.msg = kerr.UnknownServerError.Code, err.Error()
			}
		}
		r.ErrorCode = c.code
		if c.msg != "" {
			msg := c.msg
			r.ErrorMessage = &msg
		}
		resp.Results = append(resp.Results, r)
	}
	rq.respond(resp)
}

// localScram is a standalone broker's credential store, kept in memory
// until it stops.
type localScram struct {
	mu sync.Mutex
	m  map[string]map[string]string
}

func (l *localScram) ScramCredentials(context.Context) (map[string]map[string]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]map[string]string{}
	for u, m := range l.m {
		out[u] = maps.Clone(m)
	}
	return out, nil
}

func (l *localScram) UserScramCredentials(_ context.Context, user string) (map[string]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.m[user]), nil
}

func (l *localScram) AlterScramCredentials(_ context.Context, user string, set map[string]string, remove []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.m[user]
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, set)
	for _, k := range remove {
		delete(m, k)
	}
	if len(m) == 0 {
		delete(l.m, user)
	} else {
		l.m[user] = m
	}
	return nil
}
