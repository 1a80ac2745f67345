package coord

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrNoSuchMember: no coordinator member has that name.
var ErrNoSuchMember = errors.New("no such coordinator member")

// Member is one coordinator (etcd) member.
type Member struct {
	ID   uint64 `json:"id"`
	Name string `json:"name"` // empty until a newly added member has started
	// PeerURLs and ClientURLs are the advertised URLs; ClientURLs is empty
	// until the member has started.
	PeerURLs   []string `json:"peer_urls"`
	ClientURLs []string `json:"client_urls"`
}

// Members lists the coordinator cluster's members by name.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.MemberList(cctx)
	if err != nil {
		return nil, wrapErr("list coordinator members", err)
	}
	out := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		out = append(out, Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// AddMember announces a new member by its peer URLs, the first step of
// growing the cluster or replacing a member that lost its data. It returns
// the --initial-cluster value the new member must start with (its own
// entry under name, every other member's under theirs) and
// InitialClusterState "existing". Start it promptly: the cluster counts it
// in its quorum from now on. etcd refuses ("unhealthy cluster") until its
// leader has been connected to every member for 5 s; that is safe to retry.
func (c *Client) AddMember(ctx context.Context, name string, peerURLs []string) (initialCluster string, err error) {
	op := fmt.Sprintf("add coordinator member %s", name)
	if name == "" || len(peerURLs) == 0 {
		return "", fmt.Errorf("%s: need a name and peer URLs", op)
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.MemberAdd(cctx, peerURLs)
	if err != nil {
		return "", wrapErr(op, err)
	}
	var parts []string
	for _, m := range resp.Members {
		n := m.Name
		if m.ID == resp.Member.ID {
			n = name
		}
		if n == "" {
			continue // another member announced but not started yet
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ","), nil
}

// RemoveMember removes the member called name from the cluster (it stops
// serving). Remove a dead member before adding its replacement.
func (c *Client) RemoveMember(ctx context.Context, name string) error {
	op := fmt.Sprintf("remove coordinator member %s", name)
	ms, err := c.Members(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	for _, m := range ms {
		if m.Name == name {
			cctx, cancel := c.callCtx(ctx)
			defer cancel()
			if _, err := c.cli.MemberRemove(cctx, m.ID); err != nil {
				return wrapErr(op, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: %w", op, ErrNoSuchMember)
}
