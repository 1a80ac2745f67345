package kproxy

import (
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/units"
)

func TestRuleValidate(t *testing.T) {
	ok := func(r Rule) Rule {
		if r.ID == "" {
			r.ID = "r"
		}
		return r
	}
	for _, tc := range []struct {
		name string
		rule Rule
		err  string // "" = valid; else a substring of the error
	}{
		{"response drop", ok(Rule{API: "Produce", Action: "drop"}), ""},
		{"api case-insensitive", ok(Rule{API: "initproducerid", Action: "drop"}), ""},
		{"api by key", ok(Rule{API: "26", Action: "error", Error: "COORDINATOR_NOT_AVAILABLE"}), ""},
		{"request delay", ok(Rule{API: "Fetch", Direction: "request", Action: "delay", Delay: units.Duration(200 * time.Millisecond)}), ""},
		{"request duplicate", ok(Rule{API: "Produce", Direction: "request", Action: "duplicate", Probability: 0.5, Count: 3}), ""},
		{"request error produce", ok(Rule{API: "Produce", Direction: "request", Action: "error", Error: "not-leader-or-follower"}), ""},
		{"kerr name", ok(Rule{API: "Produce", Action: "error", Error: "NOT_LEADER_FOR_PARTITION"}), ""},
		{"numeric error", ok(Rule{API: "Produce", Action: "error", Error: "6"}), ""},
		{"topic on produce", ok(Rule{API: "Produce", Action: "close", Topic: "t"}), ""},
		{"topic on fetch", ok(Rule{API: "Fetch", Action: "drop", Topic: "t"}), ""},
		{"txn id on produce", ok(Rule{API: "Produce", Action: "drop", TransactionalID: "x"}), ""},
		{"txn id on end txn", ok(Rule{API: "EndTxn", Action: "drop", TransactionalID: "x"}), ""},
		{"txn id on add partitions", ok(Rule{API: "AddPartitionsToTxn", Action: "drop", TransactionalID: "x"}), ""},
		{"txn id on txn offset commit", ok(Rule{API: "TxnOffsetCommit", Action: "drop", TransactionalID: "x", Topic: "t"}), ""},
		{"no id", Rule{API: "Produce", Action: "drop"}, "id:"},
		{"no api", ok(Rule{Action: "drop"}), "api: required"},
		{"unknown api", ok(Rule{API: "Produc", Action: "drop"}), "api: unknown"},
		{"unknown key", ok(Rule{API: "9999", Action: "drop"}), "api: unknown"},
		{"bad direction", ok(Rule{API: "Produce", Direction: "both", Action: "drop"}), "direction:"},
		{"no action", ok(Rule{API: "Produce"}), "action: required"},
		{"unknown action", ok(Rule{API: "Produce", Action: "corrupt"}), "action: unknown"},
		{"probability above 1", ok(Rule{API: "Produce", Action: "drop", Probability: 1.5}), "probability:"},
		{"negative probability", ok(Rule{API: "Produce", Action: "drop", Probability: -0.1}), "probability:"},
		{"negative count", ok(Rule{API: "Produce", Action: "drop", Count: -1}), "count:"},
		{"delay missing", ok(Rule{API: "Produce", Action: "delay"}), "delay: required"},
		{"delay on drop", ok(Rule{API: "Produce", Action: "drop", Delay: units.Duration(time.Second)}), "delay: only"},
		{"error missing", ok(Rule{API: "Produce", Action: "error"}), "error: required"},
		{"error unknown", ok(Rule{API: "Produce", Action: "error", Error: "NOT_A_KAFKA_ERROR"}), "error: unknown"},
		{"error on drop", ok(Rule{API: "Produce", Action: "drop", Error: "NOT_LEADER_FOR_PARTITION"}), "error: only"},
		{"request error not produce", ok(Rule{API: "Fetch", Direction: "request", Action: "error", Error: "NOT_LEADER_FOR_PARTITION"}), "only for Produce"},
		{"duplicate response", ok(Rule{API: "Produce", Action: "duplicate"}), "duplicate is only for direction request"},
		{"topic on api without topics", ok(Rule{API: "InitProducerID", Action: "drop", Topic: "t"}), "topic:"},
		{"txn id on api without", ok(Rule{API: "Fetch", Action: "drop", TransactionalID: "x"}), "transactional_id:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rule.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("%+v: %v", tc.rule, err)
			case tc.err != "" && err == nil:
				t.Fatalf("%+v: valid, want an error with %q", tc.rule, tc.err)
			case tc.err != "" && !strings.Contains(err.Error(), tc.err):
				t.Fatalf("%+v: error %q, want it to contain %q", tc.rule, err, tc.err)
			}
		})
	}
}

func TestParseError(t *testing.T) {
	for s, want := range map[string]int16{"NOT_LEADER_OR_FOLLOWER": 6, "not-leader-for-partition": 6, "INVALID_PRODUCER_EPOCH": 47, "UNKNOWN_SERVER_ERROR": -1, "none": 0, "15": 15} {
		got, ok := ParseError(s)
		if !ok || got != want {
			t.Errorf("ParseError(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "NOPE", "30000"} {
		if _, ok := ParseError(s); ok {
			t.Errorf("ParseError(%q) ok", s)
		}
	}
}
