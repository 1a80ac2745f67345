package kproxy

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/units"
)

// Directions of a rule.
const (
	DirRequest  = "request"
	DirResponse = "response"
)

// Actions of a rule.
const (
	ActDrop      = "drop"
	ActDelay     = "delay"
	ActDuplicate = "duplicate"
	ActError     = "error"
	ActClose     = "close"
)

// Rule is one fault: which requests it matches (API, and optionally a
// topic or a transactional id named in the request), whether it acts on
// the request or on its response, and what it does. The package
// documentation describes the actions.
type Rule struct {
	// ID names the rule; Set with an existing ID replaces that rule.
	ID string `json:"id"`
	// API is a Kafka API as kmsg names it (Produce, Fetch, EndTxn,
	// InitProducerID, ...), case-insensitive, or its key number.
	API string `json:"api"`
	// Direction is request or response (the default).
	Direction string `json:"direction,omitempty"`
	// Action is drop, delay, duplicate, error or close.
	Action string `json:"action"`
	// Probability is the chance in (0, 1] that a matching request is
	// acted on; 0 means 1.
	Probability float64 `json:"probability,omitempty"`
	// Count bounds how many times the rule acts, over every connection;
	// 0 is no bound.
	Count int `json:"count,omitempty"`
	// Delay is how long action delay holds the request or response.
	Delay units.Duration `json:"delay,omitempty"`
	// Error is the Kafka error name action error answers with, as kerr
	// names it (NOT_LEADER_FOR_PARTITION), case-insensitive, '-' or '_';
	// NOT_LEADER_OR_FOLLOWER, Kafka's current name of code 6, is accepted
	// too, and so is a numeric code.
	Error string `json:"error,omitempty"`
	// Topic restricts the rule to requests naming this topic.
	Topic string `json:"topic,omitempty"`
	// TransactionalID restricts the rule to requests carrying this
	// transactional id.
	TransactionalID string `json:"transactional_id,omitempty"`
}

// compiled is a validated rule, ready to match.
type compiled struct {
	Rule
	key   int16
	dir   string
	code  int16
	delay time.Duration
	prob  float64
}

// Validate reports the first problem of r, naming the field.
func (r Rule) Validate() error {
	_, err := r.compile()
	return err
}

func (r Rule) compile() (*compiled, error) {
	c := &compiled{Rule: r}
	if strings.TrimSpace(r.ID) == "" {
		return nil, errors.New("id: required")
	}
	if r.API == "" {
		return nil, errors.New("api: required")
	}
	key, ok := ParseAPI(r.API)
	if !ok {
		return nil, fmt.Errorf("api: unknown Kafka API %q", r.API)
	}
	c.key = key
	c.API = kmsg.NameForKey(key)
	switch strings.ToLower(r.Direction) {
	case "", DirResponse:
		c.dir = DirResponse
	case DirRequest:
		c.dir = DirRequest
	default:
		return nil, fmt.Errorf("direction: %q is neither request nor response", r.Direction)
	}
	c.Direction = c.dir
	c.Action = strings.ToLower(r.Action)
	switch c.Action {
	case ActDrop, ActDelay, ActDuplicate, ActError, ActClose:
	case "":
		return nil, errors.New("action: required (drop, delay, duplicate, error or close)")
	default:
		return nil, fmt.Errorf("action: unknown action %q (want drop, delay, duplicate, error or close)", r.Action)
	}
	if math.IsNaN(r.Probability) || r.Probability < 0 || r.Probability > 1 {
		return nil, fmt.Errorf("probability: %v out of range (0, 1]", r.Probability)
	}
	c.prob = r.Probability
	if c.prob == 0 {
		c.prob = 1
	}
	if r.Count < 0 {
		return nil, fmt.Errorf("count: %d is negative", r.Count)
	}
	c.delay = time.Duration(r.Delay)
	switch {
	case c.Action == ActDelay && c.delay <= 0:
		return nil, errors.New("delay: required (> 0) for action delay")
	case c.Action != ActDelay && c.delay != 0:
		return nil, fmt.Errorf("delay: only for action delay, not %s", c.Action)
	}
	switch {
	case c.Action == ActError && r.Error == "":
		return nil, errors.New("error: required for action error (a Kafka error name such as NOT_LEADER_OR_FOLLOWER)")
	case c.Action == ActError:
		code, ok := ParseError(r.Error)
		if !ok {
			return nil, fmt.Errorf("error: unknown Kafka error %q", r.Error)
		}
		c.code = code
	case r.Error != "":
		return nil, fmt.Errorf("error: only for action error, not %s", c.Action)
	}
	name := kmsg.NameForKey(key)
	if c.Action == ActError && c.dir == DirRequest && key != int16(kmsg.Produce) {
		return nil, fmt.Errorf("action: error on direction request is only for Produce, not %s (use direction response)", name)
	}
	if c.Action == ActDuplicate && c.dir == DirResponse {
		return nil, errors.New("action: duplicate is only for direction request (the broker processes the request twice)")
	}
	if r.Topic != "" && !hasField(key, topicFields...) {
		return nil, fmt.Errorf("topic: %s requests name no topic", name)
	}
	if r.TransactionalID != "" && !hasField(key, txnFields...) {
		return nil, fmt.Errorf("transactional_id: %s requests carry no transactional id", name)
	}
	return c, nil
}

// filtered reports whether the rule needs the request body decoded.
func (c *compiled) filtered() bool { return c.Topic != "" || c.TransactionalID != "" }

// ParseAPI maps a Kafka API name as kmsg names it (case-insensitive) or a
// key number to its key.
func ParseAPI(s string) (int16, bool) {
	if n, err := strconv.ParseInt(s, 10, 16); err == nil {
		return int16(n), n >= 0 && n <= kmsg.MaxKey && kmsg.RequestForKey(int16(n)) != nil
	}
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		if kmsg.RequestForKey(k) != nil && strings.EqualFold(kmsg.NameForKey(k), s) {
			return k, true
		}
	}
	return 0, false
}

// errorAliases are Kafka's error names that kerr spells otherwise.
var errorAliases = map[string]int16{
	"NOT_LEADER_OR_FOLLOWER": 6,
	"NONE":                   0,
}

// ParseError maps a Kafka error name (as kerr names it, or a Kafka alias
// such as NOT_LEADER_OR_FOLLOWER; case-insensitive, '-' or '_') or a
// numeric code to its code.
func ParseError(s string) (int16, bool) {
	if n, err := strconv.ParseInt(s, 10, 16); err == nil {
		return int16(n), ErrorName(int16(n)) != ""
	}
	name := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	if name == "" {
		return 0, false
	}
	if code, ok := errorAliases[name]; ok {
		return code, true
	}
	for code := int16(-1); code < 1000; code++ {
		if ErrorName(code) == name {
			return code, true
		}
	}
	return 0, false
}

// ErrorName is kerr's name of code ("" if kerr does not know it).
func ErrorName(code int16) string {
	if code == 0 {
		return "NONE"
	}
	e := kerr.TypedErrorForCode(code)
	if e == nil || (e.Code != code) {
		return ""
	}
	return e.Message
}

// The request fields that name a topic, and a transactional id (Produce
// calls it TransactionID).
var (
	topicFields = []string{"Topic"}
	txnFields   = []string{"TransactionalID", "TransactionID"}
)

// hasField reports whether key's request type has, at any depth, a string
// field with one of names.
func hasField(key int16, names ...string) bool {
	r := kmsg.RequestForKey(key)
	if r == nil {
		return false
	}
	return typeHasField(reflect.TypeOf(r), names, map[reflect.Type]bool{})
}

func typeHasField(t reflect.Type, names []string, seen map[reflect.Type]bool) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return false
	}
	seen[t] = true
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		ft := f.Type
		if slices.Contains(names, f.Name) && (ft.Kind() == reflect.String || ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.String) {
			return true
		}
		if typeHasField(ft, names, seen) {
			return true
		}
	}
	return false
}

// stringFields calls fn with every non-nil string field of v, at any
// depth, that has one of names.
func stringFields(v reflect.Value, names []string, fn func(string)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			stringFields(v.Elem(), names, fn)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := 0; i < v.Len(); i++ {
			stringFields(v.Index(i), names, fn)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if !t.Field(i).IsExported() {
				continue
			}
			f := v.Field(i)
			if slices.Contains(names, t.Field(i).Name) {
				switch {
				case f.Kind() == reflect.String:
					fn(f.String())
					continue
				case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.String:
					if !f.IsNil() {
						fn(f.Elem().String())
					}
					continue
				}
			}
			stringFields(f, names, fn)
		}
	}
}

// setErrorCodes sets every int16 field named ErrorCode in v, at any depth,
// to code, and returns how many it set.
func setErrorCodes(v reflect.Value, code int16) int {
	n := 0
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			n += setErrorCodes(v.Elem(), code)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return 0
		}
		for i := 0; i < v.Len(); i++ {
			n += setErrorCodes(v.Index(i), code)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := v.Field(i)
			if t.Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 && f.CanSet() {
				f.SetInt(int64(code))
				n++
				continue
			}
			if t.Field(i).IsExported() {
				n += setErrorCodes(f, code)
			}
		}
	}
	return n
}
