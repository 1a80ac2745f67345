package group

import (
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeGroups handles a DescribeGroups. As Kafka, only a Stable group
// shows its members' metadata and assignments; an unknown group is Dead.
func (m *Manager) DescribeGroups(req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	m.mu.Lock()
	defer m.unlock()
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		rg.AuthorizedOperations = -2147483648
		if e := m.checkLocked(id); e != nil {
			rg.ErrorCode = e.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		g := m.groups[id]
		if g == nil || g.cg != nil {
			// As Kafka 4.0: DescribeGroups describes classic groups; a
			// consumer group (KIP-848) reads as Dead here and is described
			// by ConsumerGroupDescribe.
			rg.State = string(Dead)
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State, rg.ProtocolType = string(g.state), g.protocolType
		if g.state == Stable {
			rg.Protocol = g.protocol
		}
		for _, mid := range g.order {
			mem := g.members[mid]
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.InstanceID, rm.ClientID, rm.ClientHost = mem.id, mem.instanceID, mem.clientID, mem.clientHost
			rm.ProtocolMetadata, rm.MemberAssignment = []byte{}, []byte{}
			if g.state == Stable {
				if md := mem.metadata(g.protocol); md != nil {
					rm.ProtocolMetadata = md
				}
				if mem.assignment != nil {
					rm.MemberAssignment = mem.assignment
				}
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// ListGroups handles a ListGroups: the groups this broker coordinates,
// filtered by state (v4+).
func (m *Manager) ListGroups(req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	m.mu.Lock()
	defer m.unlock()
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	if m.owned.AnyLoading() {
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
	}
	ids := make([]string, 0, len(m.groups))
	for id := range m.groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		g := m.groups[id]
		state := g.state
		if g.cg != nil {
			state = g.cg.state()
		}
		// v5 (KIP-848) filters and names groups by type, as Kafka 4.0's
		// GroupCoordinatorShard does: classic or consumer.
		typ := "classic"
		if g.cg != nil {
			typ = "consumer"
		}
		if len(req.StatesFilter) > 0 && !containsFold(req.StatesFilter, string(state)) ||
			len(req.TypesFilter) > 0 && !containsFold(req.TypesFilter, typ) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = id, g.protocolType, string(state), typ
		resp.Groups = append(resp.Groups, lg)
	}
	return resp
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// Info is a group's state as the coordinator holds it.
type Info struct {
	State      State
	Generation int32
	Protocol   string
	Leader     string
	Members    []string // member ids in join order
}

// Group returns what this manager knows of a group.
func (m *Manager) Group(id string) (Info, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[id]
	if g == nil {
		return Info{}, false
	}
	if g.cg != nil {
		return Info{State: g.cg.state(), Generation: g.cg.epoch, Members: g.cg.ids()}, true
	}
	return Info{State: g.state, Generation: g.generation, Protocol: g.protocol, Leader: g.leader, Members: append([]string(nil), g.order...)}, true
}
