// Package kafkaconfig parses broker configuration in Kafka's server.properties
// syntax, with Kafka's key names and defaults, and resolves topic-level
// overrides against the broker defaults.
//
// It is named for Kafka and lives outside broker/ because its definitions are
// Kafka's, not the broker's: the lab validates a scenario's broker and topic
// config against them without importing the broker (and the embedded etcd
// server the broker pulls in).
package kafkaconfig

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Type is a config value's type.
type Type int

// The value types Kafka uses in its config definitions.
const (
	String Type = iota
	Int
	Long
	Bool
	List
	Double
	// Password is a string whose value is never shown: DescribeConfigs
	// answers it as sensitive, with no value, and Redacted hides it.
	Password
)

func (t Type) String() string {
	return [...]string{"string", "int", "long", "boolean", "list", "double", "password"}[t]
}

// Def defines one config key.
type Def struct {
	Name    string
	Type    Type
	Default string
	// Min is the smallest accepted numeric value; nil means no lower bound.
	Min *int64
	// OneOf lists the accepted values of a string key; empty means any.
	OneOf []string
	Doc   string
}

// InvalidError reports a value that a key does not accept.
type InvalidError struct {
	Key, Value, Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid value %q for configuration %s: %s", e.Value, e.Key, e.Reason)
}

// ErrUnknownKey is returned by Set for a key no definition names.
var ErrUnknownKey = errors.New("unknown configuration key")

func min(v int64) *int64 { return &v }

func (d Def) validate(v string) error {
	bad := func(reason string) error { return &InvalidError{Key: d.Name, Value: v, Reason: reason} }
	switch d.Type {
	case Int, Long:
		bits := 64
		if d.Type == Int {
			bits = 32
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, bits)
		if err != nil {
			return bad("not a " + d.Type.String())
		}
		if d.Min != nil && n < *d.Min {
			return bad(fmt.Sprintf("value must be at least %d", *d.Min))
		}
	case Bool:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "false":
		default:
			return bad("expected true or false")
		}
	case Double:
		if _, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
			return bad("not a number")
		}
	case String:
		if len(d.OneOf) > 0 {
			for _, o := range d.OneOf {
				if v == o {
					return nil
				}
			}
			return bad("expected one of " + strings.Join(d.OneOf, ", "))
		}
	}
	return nil
}

// Config holds resolved values for a set of definitions. Values are
// validated when set, so the typed getters never fail.
type Config struct {
	defs   map[string]Def
	values map[string]string
	set    map[string]bool
}

// New returns a Config with every key at its default.
func New(defs []Def) *Config {
	c := &Config{defs: map[string]Def{}, values: map[string]string{}, set: map[string]bool{}}
	for _, d := range defs {
		c.defs[d.Name] = d
		c.values[d.Name] = d.Default
	}
	return c
}

// NewBroker returns a broker Config with Kafka's defaults.
func NewBroker() *Config { return New(BrokerDefs) }

// Clone returns an independent copy.
func (c *Config) Clone() *Config {
	n := &Config{defs: c.defs, values: map[string]string{}, set: map[string]bool{}}
	for k, v := range c.values {
		n.values[k] = v
	}
	for k, v := range c.set {
		n.set[k] = v
	}
	return n
}

// Set validates and stores one value. An unknown key returns ErrUnknownKey
// (wrapped with the key) and changes nothing. A listener-prefixed key
// (listener.name.<listener>.[<mechanism>.]<key>, Kafka's per-listener
// override) is accepted when <key> is one of the listener's security keys.
func (c *Config) Set(key, value string) error {
	d, ok := c.defs[key]
	if !ok {
		base, ok := listenerBase(key)
		bd, known := c.defs[base]
		if !ok || !known || !ListenerScoped[base] {
			return fmt.Errorf("%w: %s", ErrUnknownKey, key)
		}
		d = bd
		d.Name, d.Default = key, ""
		// defs may be shared with clones: copy before adding.
		defs := make(map[string]Def, len(c.defs)+1)
		for k, v := range c.defs {
			defs[k] = v
		}
		defs[key] = d
		c.defs = defs
	}
	if err := d.validate(value); err != nil {
		return err
	}
	c.values[key] = strings.TrimSpace(value)
	c.set[key] = true
	return nil
}

// IsSet reports whether key was set explicitly rather than defaulted.
func (c *Config) IsSet(key string) bool { return c.set[key] }

// Known reports whether key has a definition.
func (c *Config) Known(key string) bool { _, ok := c.defs[key]; return ok }

// Def returns key's definition.
func (c *Config) Def(key string) (Def, bool) { d, ok := c.defs[key]; return d, ok }

func (c *Config) raw(key string) string {
	v, ok := c.values[key]
	if !ok {
		panic("config: undefined key " + key)
	}
	return v
}

// String returns a string value.
func (c *Config) String(key string) string { return c.raw(key) }

// Int returns an int or long value.
func (c *Config) Int(key string) int { return int(c.Long(key)) }

// Long returns an int or long value.
func (c *Config) Long(key string) int64 {
	n, _ := strconv.ParseInt(c.raw(key), 10, 64)
	return n
}

// Bool returns a boolean value.
func (c *Config) Bool(key string) bool { return strings.EqualFold(c.raw(key), "true") }

// Double returns a double value.
func (c *Config) Double(key string) float64 {
	f, _ := strconv.ParseFloat(c.raw(key), 64)
	return f
}

// List returns a comma-separated list value, trimmed, without empty items.
func (c *Config) List(key string) []string {
	var out []string
	for _, s := range strings.Split(c.raw(key), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Keys returns every defined key, sorted.
func (c *Config) Keys() []string {
	keys := make([]string, 0, len(c.defs))
	for k := range c.defs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ParseProperties reads Java .properties syntax: key=value, key: value or
// key value; # and ! comments; backslash line continuations and escapes.
// Each pair keeps its line number for error messages.
func ParseProperties(r io.Reader) ([]Property, error) {
	var out []Property
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	lineNo := 0
	var pending strings.Builder
	start := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimLeftFunc(sc.Text(), unicode.IsSpace)
		if pending.Len() == 0 {
			if line == "" || line[0] == '#' || line[0] == '!' {
				continue
			}
			start = lineNo
		}
		if cont := trailingBackslashes(line)%2 == 1; cont {
			pending.WriteString(line[:len(line)-1])
			continue
		}
		pending.WriteString(line)
		k, v := splitProperty(pending.String())
		pending.Reset()
		out = append(out, Property{Key: unescape(k), Value: unescape(v), Line: start})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if pending.Len() > 0 {
		k, v := splitProperty(pending.String())
		out = append(out, Property{Key: unescape(k), Value: unescape(v), Line: start})
	}
	return out, nil
}

// Property is one key/value pair read from a properties file.
type Property struct {
	Key, Value string
	Line       int
}

func trailingBackslashes(s string) int {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i] == '\\'; i-- {
		n++
	}
	return n
}

func splitProperty(s string) (string, string) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '=', ':':
			return strings.TrimSpace(s[:i]), strings.TrimLeftFunc(s[i+1:], unicode.IsSpace)
		case ' ', '\t', '\f':
			rest := strings.TrimLeftFunc(s[i:], unicode.IsSpace)
			if rest != "" && (rest[0] == '=' || rest[0] == ':') {
				rest = rest[1:]
			}
			return s[:i], strings.TrimLeftFunc(rest, unicode.IsSpace)
		}
	}
	return s, ""
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return strings.TrimRightFunc(s, unicode.IsSpace)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		default:
			b.WriteByte(s[i])
		}
	}
	return strings.TrimRightFunc(b.String(), unicode.IsSpace)
}

// Warning is a non-fatal remark about the configuration (an unknown key).
type Warning struct {
	Key, Source string
}

func (w Warning) String() string {
	return fmt.Sprintf("%s: unknown configuration key %q (ignored)", w.Source, w.Key)
}

// Load builds a broker config from a properties file (path may be empty)
// and key=value overrides applied after it. Unknown keys become warnings;
// an invalid value is an error naming the key and the value.
func Load(path string, overrides []string) (*Config, []Warning, error) {
	c := NewBroker()
	var warns []Warning
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("open config: %w", err)
		}
		props, err := ParseProperties(f)
		f.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("read config %s: %w", path, err)
		}
		for _, p := range props {
			src := fmt.Sprintf("%s:%d", path, p.Line)
			if err := c.Set(p.Key, p.Value); err != nil {
				if errors.Is(err, ErrUnknownKey) {
					warns = append(warns, Warning{Key: p.Key, Source: src})
					continue
				}
				return nil, nil, fmt.Errorf("%s: %w", src, err)
			}
		}
	}
	for _, o := range overrides {
		k, v, ok := strings.Cut(o, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, nil, fmt.Errorf("override %q: expected key=value", o)
		}
		k = strings.TrimSpace(k)
		if err := c.Set(k, v); err != nil {
			if errors.Is(err, ErrUnknownKey) {
				warns = append(warns, Warning{Key: k, Source: "--override"})
				continue
			}
			return nil, nil, fmt.Errorf("--override: %w", err)
		}
	}
	if err := c.resolveProviders(); err != nil {
		return nil, nil, err
	}
	c.applyProfile()
	if err := c.check(); err != nil {
		return nil, nil, err
	}
	return c, warns, nil
}

// check validates relations between keys.
func (c *Config) check() error {
	if len(c.List("log.dirs")) == 0 && len(c.List("log.dir")) == 0 {
		return &InvalidError{Key: "log.dirs", Value: "", Reason: "at least one log directory is required"}
	}
	if c.Long("socket.request.max.bytes") > math.MaxInt32 {
		return &InvalidError{Key: "socket.request.max.bytes", Value: c.String("socket.request.max.bytes"), Reason: "too large"}
	}
	if err := CheckKRaft(c); err != nil {
		return err
	}
	return CheckELR(c)
}

// CheckKRaft refuses a KRaft broker without a controller quorum to
// register with, or with ISR updates the KRaft era does not have (a KRaft
// leader changes its ISR only through AlterPartition, KIP-497).
func CheckKRaft(c *Config) error {
	roles := c.orProfile("process.roles")
	if c.set["process.roles"] {
		roles = c.String("process.roles") // set, even to "" (the ZooKeeper era under a KRaft profile)
	}
	if roles != "broker" {
		return nil
	}
	if v := c.orProfile("isr.update"); v != "async-alter-partition" {
		return &InvalidError{Key: "process.roles", Value: "broker", Reason: "KRaft brokers change ISRs only through AlterPartition: needs isr.update=async-alter-partition, not " + v}
	}
	if c.String("log.dirs") == "" && c.String("log.dir") == "" {
		return nil // a scenario's keys: compose fills in the quorum
	}
	voters := c.List("controller.quorum.voters")
	if len(voters) == 0 {
		return &InvalidError{Key: "process.roles", Value: "broker", Reason: "a KRaft broker (kafka.profile 4.0) needs controller.quorum.voters (id@host:port of each controller)"}
	}
	for _, v := range voters {
		if _, _, err := ParseVoter(v); err != nil {
			return &InvalidError{Key: "controller.quorum.voters", Value: v, Reason: err.Error()}
		}
	}
	return nil
}

// ParseVoter parses one controller.quorum.voters entry, id@host:port.
func ParseVoter(s string) (id int32, addr string, err error) {
	idStr, addr, ok := strings.Cut(s, "@")
	n, perr := strconv.ParseInt(idStr, 10, 32)
	if !ok || perr != nil || n < 0 {
		return 0, "", fmt.Errorf("%q is not id@host:port", s)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return 0, "", fmt.Errorf("%q is not id@host:port: %v", s, err)
	}
	return int32(n), addr, nil
}

// orProfile is key's value, or its kafka.profile default where the key is
// unset and the profile not applied yet (a scenario's keys).
func (c *Config) orProfile(key string) string {
	if v := c.String(key); v != "" {
		return v
	}
	return Profiles[c.String("kafka.profile")].Defaults[key]
}

// CheckELR refuses eligible leader replicas without what makes them safe
// (KIP-966): ISR changes through the controller, which keeps the ELR
// beside the ISR, and a high watermark that cannot advance below min ISR,
// so that every ELR member holds everything up to it. A config whose
// profile is applied (a broker's) or a scenario's keys are checked alike.
func CheckELR(c *Config) error {
	if !c.Bool("eligible.leader.replicas.enable") {
		return nil
	}
	if v := c.orProfile("isr.update"); v != "async-alter-partition" {
		return &InvalidError{Key: "eligible.leader.replicas.enable", Value: "true", Reason: "needs isr.update=async-alter-partition (the controller keeps the ELR as it changes the ISR), not " + v}
	}
	if v := c.orProfile("hw.requires-min-isr"); v != "true" {
		return &InvalidError{Key: "eligible.leader.replicas.enable", Value: "true", Reason: "needs hw.requires-min-isr=true (an ELR member holds everything up to a high watermark that cannot advance below min ISR)"}
	}
	return nil
}

// LogDirs returns log.dirs, falling back to log.dir as Kafka does.
func (c *Config) LogDirs() []string {
	if d := c.List("log.dirs"); len(d) > 0 {
		return d
	}
	return c.List("log.dir")
}
