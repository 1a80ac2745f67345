package nemesis

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/internal/mountinfo"
)

// TestLimpAndClockSpecs: the clock, cgroup and packet kinds read as a user
// writes them (percentages, sizes, durations) and write back canonically;
// a bad value is an ErrBadFault naming the field, caught when the spec is
// parsed, before any cluster exists.
func TestLimpAndClockSpecs(t *testing.T) {
	good := []struct{ in, out string }{
		{`{"kind":"clock-bump","nodes":["b2"],"offset":"30s"}`, ""},
		{`{"kind":"clock-bump","nodes":["leader:t/0"],"offset":"-1h"}`, `{"kind":"clock-bump","nodes":["leader:t/0"],"offset":"-1h0m0s"}`},
		{`{"kind":"clock-strobe","nodes":["b2"],"offset":"200ms","period":"50ms"}`, ""},
		{`{"kind":"cpu-throttle","nodes":["follower:t/0"],"cpu":"10%"}`, ""},
		{`{"kind":"cpu-throttle","nodes":["b1"],"cpu":7.5,"period":"20ms"}`, `{"kind":"cpu-throttle","nodes":["b1"],"cpu":"7.5%","period":"20ms"}`},
		{`{"kind":"memory-pressure","nodes":["b3"],"limit":"64MiB"}`, ""},
		{`{"kind":"packet","nodes":["b1"],"duplicate":"20%","reorder":"20%","corrupt":"5%"}`, ""},
		{`{"kind":"packet","nodes":["leader:t/0"],"corrupt":1,"checksum":"fix","direction":"in","correlation":"25%"}`,
			`{"kind":"packet","nodes":["leader:t/0"],"corrupt":"1%","correlation":"25%","checksum":"fix","direction":"in"}`},
		{`{"kind":"packet","nodes":["b1"],"reorder":"50%","gap":"30ms"}`, ""},
		{`{"kind":"corrupt","nodes":["follower:isrlab/0"],"file":"segment","mode":"bitflip"}`, ""},
		{`{"kind":"corrupt","nodes":["b1"],"file":"index","mode":"zero","length":"512B","where":"middle","partition":"t/0","stop":"graceful"}`, ""},
		{`{"kind":"corrupt","nodes":["b1"],"file":"hw-checkpoint","mode":"truncate"}`, ""},
		{`{"kind":"memory-pressure","nodes":["b3"],"limit":"64MB","max":"1GiB"}`, `{"kind":"memory-pressure","nodes":["b3"],"limit":"62500KiB","max":"1GiB"}`},
	}
	for _, tt := range good {
		f, err := ParseUserSpec([]byte(tt.in))
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		out, _ := json.Marshal(Spec{f})
		want := tt.out
		if want == "" {
			want = tt.in
		}
		if string(out) != want {
			t.Errorf("%s\n wrote %s\n  want %s", tt.in, out, want)
		}
	}
	bad := []struct{ in, want string }{
		{`{"kind":"clock-bump","nodes":["b2"]}`, "non-zero offset"},
		{`{"kind":"clock-bump","nodes":["b2"],"offset":"soon"}`, `duration "soon"`},
		{`{"kind":"clock-bump","nodes":["b2"],"offset_ms":30000}`, `unknown field "offset_ms"`},
		{`{"kind":"clock-strobe","nodes":["b2"],"offset":"200ms"}`, "period 0s: want at least 10ms"},
		{`{"kind":"clock-strobe","nodes":["b2"],"offset":"200ms","period":"1ms"}`, "period 1ms"},
		{`{"kind":"clock-strobe","nodes":["b2"],"offset":"200ms","period":"50ms","strober_pid":7}`, "set by the fault when it fires"},
		{`{"kind":"cpu-throttle","nodes":["b2"]}`, "cpu 0%: want a percentage in (0%, 100%]"},
		{`{"kind":"cpu-throttle","nodes":["b2"],"cpu":"120%"}`, "cpu 120%"},
		{`{"kind":"cpu-throttle","nodes":["b2"],"cpu":"ten"}`, `percentage "ten"`},
		{`{"kind":"cpu-throttle","nodes":["b2"],"cpu":"0.5%"}`, "least quota is 1ms"},
		{`{"kind":"cpu-throttle","nodes":["b2"],"cpu":"10%","period":"2s"}`, "period 2s: want 1ms to 1s"},
		{`{"kind":"cpu-throttle","nodes":["b2"],"cpu":"10%","shares":5}`, `unknown field "shares"`},
		{`{"kind":"cpu-throttle","nodes":["leader:t"],"cpu":"10%"}`, "topic/partition"},
		{`{"kind":"packet","nodes":["b1"]}`, "packet needs duplicate, reorder or corrupt"},
		{`{"kind":"packet","nodes":["b1"],"duplicate":"120%"}`, "duplicate 120%: want a percentage in [0%, 100%]"},
		{`{"kind":"packet","nodes":["b1"],"reorder":"-5%"}`, "reorder -5%"},
		{`{"kind":"packet","nodes":["b1"],"corrupt":"often"}`, `percentage "often"`},
		{`{"kind":"packet","nodes":["b1"],"corrupt":"5%","correlation":"150%"}`, "correlation 150%"},
		{`{"kind":"packet","nodes":["b1"],"duplicate":"5%","gap":"10ms"}`, "give reorder too"},
		{`{"kind":"packet","nodes":["b1"],"reorder":"5%","gap":"1h"}`, "gap 1h0m0s: want up to 10s"},
		{`{"kind":"packet","nodes":["b1"],"reorder":"5%","gap":"fast"}`, `duration "fast"`},
		{`{"kind":"packet","nodes":["b1"],"corrupt":"5%","checksum":"recompute"}`, `checksum "recompute": want keep or fix`},
		{`{"kind":"packet","nodes":["b1"],"duplicate":"5%","checksum":"fix"}`, "give corrupt too"},
		{`{"kind":"packet","nodes":["b1"],"duplicate":"5%","direction":"up"}`, `direction "up"`},
		{`{"kind":"packet","nodes":["b1"],"duplicate":"5%","delay":"5ms"}`, `unknown field "delay"`},
		{`{"kind":"packet","nodes":["b1"],"duplicate":"5%","delayer_pid":4}`, "set by the fault when it fires"},
		{`{"kind":"corrupt","nodes":["b1"],"mode":"bitflip"}`, `corrupt file "": want one of [hw-checkpoint index leader-epoch-checkpoint log-start-checkpoint producer-snapshot recovery-checkpoint segment timeindex txn-index]`},
		{`{"kind":"corrupt","nodes":["b1"],"file":"wal","mode":"bitflip"}`, `corrupt file "wal"`},
		{`{"kind":"corrupt","nodes":["b1"],"file":"segment"}`, `corrupt mode "": want bitflip, truncate or zero`},
		{`{"kind":"corrupt","nodes":["b1"],"file":"segment","mode":"shred"}`, `mode "shred"`},
		{`{"kind":"corrupt","nodes":["b1"],"file":"segment","mode":"bitflip","length":"1KiB"}`, "length is how many bytes mode zero zeroes"},
		{`{"kind":"corrupt","nodes":["b1"],"file":"segment","mode":"zero","length":"lots"}`, `size "lots"`},
		{`{"kind":"corrupt","nodes":["b1"],"file":"segment","mode":"zero","where":"head"}`, `where "head": want tail or middle`},
		{`{"kind":"corrupt","nodes":["b1"],"file":"segment","mode":"zero","stop":"pause"}`, `stop "pause": want kill or graceful`},
		{`{"kind":"corrupt","nodes":["b1"],"file":"segment","mode":"zero","partition":"t"}`, `"t" is not topic/partition`},
		{`{"kind":"corrupt","nodes":["b1"],"file":"hw-checkpoint","mode":"zero","partition":"t/0"}`, "one per log directory"},
		{`{"kind":"corrupt","nodes":["b1"],"file":"segment","mode":"zero","damage":[]}`, "set by the fault when it fires"},
		{`{"kind":"memory-pressure","nodes":["b3"]}`, "limit 0B: want at least 4MiB"},
		{`{"kind":"memory-pressure","nodes":["b3"],"limit":"64 parsecs"}`, `size "64 parsecs"`},
		{`{"kind":"memory-pressure","nodes":["b3"],"limit":"64MiB","max":"32MiB"}`, "max 32MiB is below its limit 64MiB"},
		{`{"kind":"memory-pressure","nodes":["b3"],"limit":"64MiB","cgroups":[]}`, "set by the fault when it fires"},
	}
	for _, tt := range bad {
		_, err := ParseUserSpec([]byte(tt.in))
		if !errors.Is(err, ErrBadFault) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want ErrBadFault mentioning %q", tt.in, err, tt.want)
		}
	}
}

// TestClockTargets: clock faults move brokers; a coordinator on this
// machine is unsupported (its etcd reads the monotonic clock) and says why;
// a client is no target.
func TestClockTargets(t *testing.T) {
	env := &Env{Cluster: fakeCluster(), Resolver: fixedView(view)}
	for _, tt := range []struct {
		f    Fault
		want error
		msg  string
	}{
		{&ClockBump{procNodes: procNodes{Nodes: []string{"c1"}}, Offset: 1e9}, ErrUnsupported, "monotonic clock"},
		{&ClockStrobe{procNodes: procNodes{Nodes: []string{"coordinators"}}, Offset: 1e9, Period: 1e8}, ErrUnsupported, "monotonic clock"},
		{&ClockSkew{procNodes: procNodes{Nodes: []string{"c2"}}, OffsetMs: 5}, ErrUnsupported, "c2 is a coordinator"},
		{&ClockBump{procNodes: procNodes{Nodes: []string{"client1"}}, Offset: 1e9}, ErrBadFault, "client1 is not a broker"},
	} {
		err := tt.f.NewRun().Resolve(context.Background(), env)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: err = %v, want %v mentioning %q", tt.f.Kind(), err, tt.want, tt.msg)
		}
	}
}

func TestPercentAndBytes(t *testing.T) {
	for in, want := range map[string]Percent{`"20%"`: 20, `"2.5 %"`: 2.5, `20`: 20, `"0%"`: 0} {
		var p Percent
		if err := json.Unmarshal([]byte(in), &p); err != nil || p != want {
			t.Errorf("Percent %s = %v, %v; want %v", in, p, err, want)
		}
	}
	for in, want := range map[string]Bytes{"64MiB": 64 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "100MB": 100e6, "4096": 4096, "1.5 GiB": 3 << 29} {
		b, err := ParseBytes(in)
		if err != nil || b != want {
			t.Errorf("ParseBytes(%q) = %v, %v; want %v", in, b, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "64 parsecs", "1e30GiB"} {
		if _, err := ParseBytes(in); !errors.Is(err, ErrBadFault) {
			t.Errorf("ParseBytes(%q): err = %v, want ErrBadFault", in, err)
		}
	}
}

// TestCgroupMounts reads the hierarchies of a hybrid machine (this kind:
// cpu and memory on v1, an empty v2) and of a v2-only one.
func TestCgroupMounts(t *testing.T) {
	hybrid := `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	ms, err := mountinfo.Parse(strings.NewReader(hybrid))
	if err != nil {
		t.Fatal(err)
	}
	hs := cgroupMounts(ms)
	var got []string
	for _, h := range hs {
		got = append(got, h.mount+" v"+string(rune('0'+h.version()))+" "+strings.Join(h.controllers, ","))
	}
	want := []string{"/sys/fs/cgroup/cpu v1 cpu,cpuacct", "/sys/fs/cgroup/memory v1 memory", "/sys/fs/cgroup/systemd v1 xattr", "/sys/fs/cgroup/unified v2 "}
	if !slices.Equal(got, want) {
		t.Errorf("hybrid: %q\nwant %q", got, want)
	}
	v2, _ := mountinfo.Parse(strings.NewReader("25 21 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"))
	if hs := cgroupMounts(v2); len(hs) != 1 || !hs[0].v2 || hs[0].mount != "/sys/fs/cgroup" {
		t.Errorf("v2 only: %+v", hs)
	}
	for name, ok := range map[string]bool{
		"isrlab-20240101-ab12-f3-b2": true, "isrlab-r1-f10-client1": true,
		"isrlab-r1-b2": false, "docker": false, "isrlab-R1-f1-b1": false,
	} {
		if cgroupNameRE.MatchString(name) != ok {
			t.Errorf("cgroup name %q matched = %v", name, !ok)
		}
	}
	if m := cgroupNameRE.FindStringSubmatch(cgroupName("abc-12", "f7", "b3")); m == nil || m[1] != "abc-12" || m[2] != "f7" || m[3] != "b3" {
		t.Errorf("cgroupName does not parse back: %q", m)
	}
}

// TestCorruptPacket: a corrupted packet differs from the original in one
// payload bit; its checksum stays wrong unless fixed, and a fixed one
// verifies (a correct segment's checksum over itself and its
// pseudo-header sums to zero).
func TestCorruptPacket(t *testing.T) {
	udp := func(payload string) []byte {
		p := make([]byte, 28+len(payload))
		p[0], p[9] = 0x45, 17
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		copy(p[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		binary.BigEndian.PutUint16(p[20:], 4000)
		binary.BigEndian.PutUint16(p[22:], 7002)
		binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
		copy(p[28:], payload)
		binary.BigEndian.PutUint16(p[26:], transportChecksum(p[12:16], p[16:20], 17, p[20:]))
		return p
	}
	valid := func(p []byte) bool { return transportChecksum(p[12:16], p[16:20], p[9], p[20:]) == 0 }
	rng := rand.New(rand.NewSource(1))
	for _, fix := range []bool{false, true} {
		orig := udp("hello, broker")
		if !valid(orig) {
			t.Fatal("the test's packet has a bad checksum")
		}
		p := slices.Clone(orig)
		if !corruptPacket(p, rng, fix) {
			t.Fatal("not corrupted")
		}
		diff := 0
		for i := 28; i < len(p); i++ {
			diff += bits.OnesCount8(p[i] ^ orig[i])
		}
		if diff != 1 || !bytes.Equal(p[:26], orig[:26]) {
			t.Fatalf("fix=%v: %d payload bits differ, headers equal = %v", fix, diff, bytes.Equal(p[:26], orig[:26]))
		}
		if valid(p) != fix {
			t.Fatalf("fix=%v: checksum valid = %v", fix, valid(p))
		}
	}
	empty := udp("")
	frag := udp("x")
	binary.BigEndian.PutUint16(frag[6:], 5) // a later fragment
	for name, p := range map[string][]byte{"no payload": empty, "later fragment": frag, "short": {0x45, 0}} {
		if corruptPacket(p, rng, false) {
			t.Errorf("%s: corrupted", name)
		}
	}
}
