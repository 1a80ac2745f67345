// Package clusterapi is the brokers' HTTP side channel, served on each
// broker's metrics listener next to /metrics: the types the broker serves
// and the client the lab, series and nemesis read and drive it with. It
// imports nothing of the broker, so that reading a cluster's state does not
// pull the broker (and its embedded coordinator) into a program.
//
//	GET  /v1/partitions        Partitions: every replica this broker holds
//	GET  /v1/events?since=N    Events: role, leader, epoch and ISR changes after N
//	GET  /v1/clock             Clock: the skew added to the broker's clock
//	POST /v1/clock             {"offset_ms": N} sets it (0 heals)
//	/v1/testhooks              a test's holds and delays of chosen requests
//	                           (only with test.hooks.enable; HookRule)
package clusterapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
)

// The side channel's paths.
const (
	PartitionsPath = "/v1/partitions"
	EventsPath     = "/v1/events"
	ClockPath      = "/v1/clock"
	TestHooksPath  = "/v1/testhooks"
)

// HookRule is what a test asks a broker's test hooks for: requests of API
// (kmsg's name: "Fetch", "AlterPartition") from broker From (a follower's
// replica id in Fetch, OffsetForLeaderEpoch and ListOffsets, the broker id
// in AlterPartition, the controller's in LeaderAndIsr, UpdateMetadata and
// StopReplica) naming Topic and Partition (in Fetch, OffsetForLeaderEpoch,
// ListOffsets, Produce and AlterPartition). An unset field matches
// anything; a set one never matches a request that does not carry it.
// DelayMs 0 holds matching requests until the rule is removed; more
// delays each by that long.
type HookRule struct {
	API       string `json:"api"`
	From      *int32 `json:"from,omitempty"`
	Topic     string `json:"topic,omitempty"`
	Partition *int32 `json:"partition,omitempty"`
	DelayMs   int64  `json:"delay_ms,omitempty"`
}

// HookState is a rule as GET /v1/testhooks shows it.
type HookState struct {
	ID int `json:"id"`
	HookRule
	Matched int `json:"matched"` // requests it held or delayed so far
	Held    int `json:"held"`    // requests it holds or delays now
}

// PartitionStatus is one replica's state as its broker sees it.
type PartitionStatus struct {
	Topic         string  `json:"topic"`
	Partition     int32   `json:"partition"`
	Role          string  `json:"role"` // leader, follower or none
	Leader        int32   `json:"leader"`
	LeaderEpoch   int32   `json:"leader_epoch"`
	ISR           []int32 `json:"isr"`
	Replicas      []int32 `json:"replicas"`
	HighWatermark int64   `json:"hw"`
	// LastStableOffset is the LSO: the HW, or the first offset of the
	// earliest undecided transaction when that is lower.
	LastStableOffset int64 `json:"lso"`
	LogEndOffset     int64 `json:"leo"`
	LogStartOffset   int64 `json:"log_start"`
}

// Partitions is the answer of /v1/partitions.
type Partitions struct {
	Broker      int32             `json:"broker"`
	BrokerEpoch int64             `json:"broker_epoch"`
	TimeMs      int64             `json:"time_ms"`
	Partitions  []PartitionStatus `json:"partitions"`
}

// StateEvent is a change of a replica's role, leader, leader epoch or ISR,
// as seen by its broker; Seq increases by one per event.
type StateEvent struct {
	Seq    int64 `json:"seq"`
	TimeMs int64 `json:"time_ms"`
	Broker int32 `json:"broker"`
	PartitionStatus
}

// Events is the answer of /v1/events.
type Events struct {
	Broker int32        `json:"broker"`
	Events []StateEvent `json:"events"`
}

// Clock is the answer of /v1/clock.
type Clock struct {
	Broker   int32 `json:"broker"`
	OffsetMs int64 `json:"offset_ms"`
	TimeMs   int64 `json:"time_ms"`
}

// SetClock is the body of a POST to /v1/clock.
type SetClock struct {
	OffsetMs *int64 `json:"offset_ms"`
}

// Client reads one broker's side channel.
type Client struct {
	// Base is the listener's URL, http://host:port (see BaseURL).
	Base string
	// HTTP sends the requests; nil uses http.DefaultClient. Give it a
	// transport that dials inside the cluster's network where it has one.
	HTTP *http.Client
}

// BaseURL is the side channel's URL at host and port.
func BaseURL(host string, port int) string {
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// Partitions reads /v1/partitions.
func (c *Client) Partitions(ctx context.Context) (Partitions, error) {
	var p Partitions
	return p, c.do(ctx, http.MethodGet, PartitionsPath, nil, &p)
}

// Events reads /v1/events: the changes after sequence number since.
func (c *Client) Events(ctx context.Context, since int64) (Events, error) {
	var e Events
	return e, c.do(ctx, http.MethodGet, EventsPath+"?since="+strconv.FormatInt(since, 10), nil, &e)
}

// Clock reads /v1/clock.
func (c *Client) Clock(ctx context.Context) (Clock, error) {
	var k Clock
	return k, c.do(ctx, http.MethodGet, ClockPath, nil, &k)
}

// SetClock sets the skew added to the broker's clock (0 heals).
func (c *Client) SetClock(ctx context.Context, offsetMs int64) (Clock, error) {
	var k Clock
	return k, c.do(ctx, http.MethodPost, ClockPath, SetClock{OffsetMs: &offsetMs}, &k)
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	url := c.Base + path
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(msg))
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode: %w", method, url, err)
	}
	return nil
}
