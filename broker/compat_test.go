package broker

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/internal/scripttest"
)

// rawConn is one client connection that sends hand-built request frames,
// for what clients do not send: old versions, unsupported ones, acks=0.
type rawConn struct {
	t    testing.TB
	conn net.Conn
	corr int32
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, conn: c}
}

// send writes req at its version with a standard request header.
func (c *rawConn) send(req kmsg.Request) {
	c.t.Helper()
	c.corr++
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(c.corr))
	b = binary.BigEndian.AppendUint16(b, 3)
	b = append(b, "raw"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// frame reads one response frame and returns its body after the
// correlation id (and the header tags when flexible); err is io.EOF when
// the broker closed the connection.
func (c *rawConn) frame(flexibleHeader bool) ([]byte, error) {
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := wire.ReadFrame(c.conn, 1<<30, nil)
	if err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(f)); got != c.corr {
		c.t.Fatalf("correlation id %d, want %d", got, c.corr)
	}
	body := f[4:]
	if flexibleHeader {
		r := kbin.Reader{Src: body}
		kmsg.SkipTags(&r)
		body = r.Src
	}
	return body, nil
}

// roundTrip sends req and decodes the response at the request's version.
func (c *rawConn) roundTrip(req kmsg.Request) kmsg.Response {
	c.t.Helper()
	c.send(req)
	body, err := c.frame(req.IsFlexible() && req.Key() != wire.ApiVersionsKey)
	if err != nil {
		c.t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatalf("%s v%d response: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

// apiVersions sends ApiVersions at version and decodes the answer at the
// version it came in (v0 when the broker falls back).
func (c *rawConn) apiVersions(version int16, name, ver string) *kmsg.ApiVersionsResponse {
	c.t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(version)
	req.ClientSoftwareName, req.ClientSoftwareVersion = name, ver
	c.send(req)
	body, err := c.frame(false)
	if err != nil {
		c.t.Fatal(err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(min(version, 3))
	if err := resp.ReadFrom(body); err != nil || resp.ErrorCode == kerr.UnsupportedVersion.Code {
		resp = kmsg.NewPtrApiVersionsResponse()
		if err := resp.ReadFrom(body); err != nil {
			c.t.Fatalf("ApiVersions v%d answer: %v", version, err)
		}
	}
	return resp
}

// TestApiVersionsPerProfile pins what each kafka.profile advertises
// (testdata/apiversions/<profile>.txt, -rewrite rewrites) against the
// release it stands for, and how an unsupported ApiVersions is answered.
func TestApiVersionsPerProfile(t *testing.T) {
	for _, profile := range []string{"0.10", "2.4", "2.6", "3.7"} {
		t.Run(profile, func(t *testing.T) {
			b := startBroker(t, t.TempDir(), "kafka.profile="+profile)
			c := dialRaw(t, b.Addrs()[0])
			resp := c.apiVersions(0, "", "")
			if resp.ErrorCode != 0 {
				t.Fatalf("ApiVersions v0: %v", kerr.ErrorForCode(resp.ErrorCode))
			}
			var out strings.Builder
			release := map[string]string{"0.10": "0.10.2", "2.4": "2.4.1", "2.6": "2.6.3", "3.7": "3.7.1"}[profile]
			fmt.Fprintf(&out, "# ApiVersions with kafka.profile=%s: the APIs isrlab serves, at the versions Kafka %s advertised\n", profile, release)
			for _, k := range resp.ApiKeys {
				fmt.Fprintf(&out, "%3d %-24s %d-%d\n", k.ApiKey, kmsg.NameForKey(k.ApiKey), k.MinVersion, k.MaxVersion)
			}
			scripttest.Golden(t, filepath.Join("testdata", "apiversions", profile+".txt"), out.String())

			// Above the advertised ApiVersions: v0 and UNSUPPORTED_VERSION,
			// with only the ApiVersions entry from 2.4 (KIP-511), with none
			// before.
			over := int16(4)
			if profile == "0.10" {
				over = 1
			}
			fb := c.apiVersions(over, "isrlab-test", "1.0")
			if fb.ErrorCode != kerr.UnsupportedVersion.Code {
				t.Fatalf("ApiVersions v%d: error %v", over, kerr.ErrorForCode(fb.ErrorCode))
			}
			wantKeys := 1
			if profile == "0.10" {
				wantKeys = 0
			}
			if len(fb.ApiKeys) != wantKeys || (wantKeys == 1 && (fb.ApiKeys[0].ApiKey != 18 || fb.ApiKeys[0].MaxVersion != 3)) {
				t.Fatalf("ApiVersions v%d fallback keys %+v", over, fb.ApiKeys)
			}
			if profile != "0.10" {
				if bad := c.apiVersions(3, "-not valid-", "1"); bad.ErrorCode != kerr.InvalidRequest.Code || len(bad.ApiKeys) != 0 {
					t.Fatalf("bad client software name: %v %+v", kerr.ErrorForCode(bad.ErrorCode), bad.ApiKeys)
				}
			}
		})
	}
}

// TestUnsupportedVersionClosesConnection: outside the served range Kafka
// 3.7 closes the connection (SocketServer's InvalidRequestException).
func TestUnsupportedVersionClosesConnection(t *testing.T) {
	b := startBroker(t, t.TempDir())
	for _, req := range []kmsg.Request{
		func() kmsg.Request { r := kmsg.NewPtrProduceRequest(); r.SetVersion(11); return r }(),
		func() kmsg.Request { r := kmsg.NewPtrFetchRequest(); r.SetVersion(17); return r }(),
		func() kmsg.Request { r := kmsg.NewPtrMetadataRequest(); r.SetVersion(13); return r }(),
		func() kmsg.Request { r := kmsg.NewPtrListOffsetsRequest(); r.SetVersion(9); return r }(),
	} {
		c := dialRaw(t, b.Addrs()[0])
		c.send(req)
		if _, err := c.frame(false); !errors.Is(err, io.EOF) {
			t.Errorf("%s v%d: %v, want the connection closed", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
		}
	}
	// The highest served versions are answered.
	c := dialRaw(t, b.Addrs()[0])
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	if resp := c.roundTrip(md).(*kmsg.MetadataResponse); len(resp.Brokers) != 1 {
		t.Fatalf("Metadata v12: %+v", resp)
	}
}

// legacyMessage encodes one magic 0 or 1 message with kmsg's types and its
// CRC, independently of the broker's converter.
func legacyMessage(magic int8, offset int64, attrs int8, ts int64, key, value []byte) []byte {
	var b []byte
	if magic == 0 {
		m := kmsg.MessageV0{Offset: offset, Magic: 0, Attributes: attrs, Key: key, Value: value}
		b = m.AppendTo(nil)
	} else {
		m := kmsg.MessageV1{Offset: offset, Magic: 1, Attributes: attrs, Timestamp: ts, Key: key, Value: value}
		b = m.AppendTo(nil)
	}
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[16:]))
	return b
}

type legacyMsg struct {
	offset     int64
	magic      int8
	attrs      int8
	ts         int64
	key, value []byte
}

// readLegacy decodes a message set, opening gzip wrappers, checking every
// CRC and making inner offsets absolute, as an old consumer does.
func readLegacy(t *testing.T, set []byte) []legacyMsg {
	t.Helper()
	var out []legacyMsg
	for len(set) >= 12 {
		size := int(binary.BigEndian.Uint32(set[8:]))
		if len(set) < 12+size {
			break
		}
		entry := set[:12+size]
		set = set[12+size:]
		if crc32.ChecksumIEEE(entry[16:]) != binary.BigEndian.Uint32(entry[12:]) {
			t.Fatalf("message CRC mismatch")
		}
		var m legacyMsg
		switch m.magic = int8(entry[16]); m.magic {
		case 0:
			var v kmsg.MessageV0
			if err := v.ReadFrom(entry); err != nil {
				t.Fatal(err)
			}
			m.offset, m.attrs, m.ts, m.key, m.value = v.Offset, v.Attributes, -1, v.Key, v.Value
		case 1:
			var v kmsg.MessageV1
			if err := v.ReadFrom(entry); err != nil {
				t.Fatal(err)
			}
			m.offset, m.attrs, m.ts, m.key, m.value = v.Offset, v.Attributes, v.Timestamp, v.Key, v.Value
		default:
			t.Fatalf("magic %d in a legacy message set", m.magic)
		}
		if m.attrs&7 == 0 {
			out = append(out, m)
			continue
		}
		if m.attrs&7 != 1 {
			t.Fatalf("codec %d (the test reads gzip only)", m.attrs&7)
		}
		zr, err := gzip.NewReader(bytes.NewReader(m.value))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		inner := readLegacy(t, raw)
		base := int64(0)
		if m.magic == 1 {
			base = m.offset - inner[len(inner)-1].offset
		}
		for _, im := range inner {
			im.offset += base
			out = append(out, im)
		}
	}
	return out
}

// TestFetchV0DownConverts: records kgo produced (v2 batches, plain and
// gzip) fetched with Fetch v0 and v2 come back as message format v0 and v1
// with their offsets, keys, values and (v1) timestamps; Fetch v4 gets the
// stored v2 batches.
func TestFetchV0DownConverts(t *testing.T) {
	b := startBroker(t, t.TempDir())
	base := time.UnixMilli(1_700_000_000_000)
	pad := strings.Repeat("x", 300) // so that gzip pays and kgo compresses
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression()} {
		cl := b.client(t, kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic("down"), kgo.ManualFlushing())
		createTopicIfMissing(t, cl, "down", 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for i := 0; i < 5; i++ {
			cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d%s", i, pad)), Timestamp: base.Add(time.Duration(i) * time.Second)}, nil)
		}
		if err := cl.Flush(ctx); err != nil { // one batch of five
			t.Fatal(err)
		}
		cancel()
	}
	// Offsets 0-4 plain, 5-9 gzip.
	c := dialRaw(t, b.Addrs()[0])
	for _, tc := range []struct {
		version int16
		magic   int8
		from    int64
		first   int64 // compressed batches come whole
	}{{0, 0, 3, 3}, {1, 0, 7, 5}, {2, 1, 0, 0}, {3, 1, 6, 5}} {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(tc.version)
		req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 100, 1, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "down"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes = tc.from, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := c.roundTrip(req).(*kmsg.FetchResponse)
		sp := resp.Topics[0].Partitions[0]
		if sp.ErrorCode != 0 || sp.HighWatermark != 10 {
			t.Fatalf("Fetch v%d: %v, HW %d", tc.version, kerr.ErrorForCode(sp.ErrorCode), sp.HighWatermark)
		}
		msgs := readLegacy(t, sp.RecordBatches)
		if len(msgs) != int(10-tc.first) {
			t.Fatalf("Fetch v%d from %d: %d messages, want %d", tc.version, tc.from, len(msgs), 10-tc.first)
		}
		for i, m := range msgs {
			off := tc.first + int64(i)
			wantTs := int64(-1)
			if tc.magic == 1 {
				wantTs = base.Add(time.Duration(off%5) * time.Second).UnixMilli()
			}
			if m.magic != tc.magic || m.offset != off || m.ts != wantTs || string(m.key) != fmt.Sprintf("k%d", off%5) || string(m.value) != fmt.Sprintf("v%d%s", off%5, pad) {
				t.Fatalf("Fetch v%d message %d: %+v, want magic %d offset %d ts %d", tc.version, i, m, tc.magic, off, wantTs)
			}
		}
	}
	// v4 and up get the stored batches untouched.
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(4)
	req.ReplicaID, req.MaxBytes = -1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "down"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	if got := c.roundTrip(req).(*kmsg.FetchResponse).Topics[0].Partitions[0].RecordBatches; len(got) < 17 || got[16] != 2 {
		t.Fatalf("Fetch v4 records are not v2 batches")
	}
	// With message.downconversion.enable=false old fetchers are refused.
	adm := kadm.NewClient(b.client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	off := "false"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "message.downconversion.enable", Value: &off}}, "down"); err != nil {
		t.Fatal(err)
	}
	req.SetVersion(3)
	if code := c.roundTrip(req).(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.UnsupportedVersion.Code {
		t.Fatalf("down-conversion disabled: %v", kerr.ErrorForCode(code))
	}
}

// TestProduceLegacyMessageSets: Produce v0-v2 message sets (magic 0,
// magic 1, a gzip wrapper) are stored as v2 batches that kgo reads back
// with the offsets the responses gave and the timestamps sent; a
// LogAppendTime topic stamps them. Bad sets get Kafka's errors.
func TestProduceLegacyMessageSets(t *testing.T) {
	b := startBroker(t, t.TempDir())
	cl := b.client(t)
	createTopic(t, cl, "legacy", 1, nil)
	appendTime := "LogAppendTime"
	createTopic(t, cl, "legacy-lat", 1, map[string]*string{"message.timestamp.type": &appendTime})
	c := dialRaw(t, b.Addrs()[0])
	produce := func(version int16, topic string, set []byte) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(version)
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = set
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return c.roundTrip(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	}
	ts := int64(1_700_000_000_000)
	set := func(magic int8, n, from int) []byte {
		var s []byte
		for i := 0; i < n; i++ {
			s = append(s, legacyMessage(magic, int64(i), 0, ts+int64(from+i), []byte(fmt.Sprintf("k%d", from+i)), []byte(fmt.Sprintf("v%d", from+i)))...)
		}
		return s
	}
	gzipped := func(magic int8, n, from int) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(set(magic, n, from))
		zw.Close()
		return legacyMessage(magic, int64(n-1), 1, ts+int64(from+n-1), nil, buf.Bytes())
	}
	for _, step := range []struct {
		version int16
		records []byte
		base    int64
	}{
		{0, set(0, 3, 0), 0},     // offsets 0-2, no timestamps
		{1, set(0, 2, 3), 3},     // 3-4
		{2, set(1, 3, 5), 5},     // 5-7, timestamps kept
		{2, gzipped(1, 4, 8), 8}, // 8-11 in one wrapper
		{0, gzipped(0, 2, 12), 12},
	} {
		sp := produce(step.version, "legacy", step.records)
		if sp.ErrorCode != 0 || sp.BaseOffset != step.base {
			t.Fatalf("Produce v%d: %v at %d, want offset %d", step.version, kerr.ErrorForCode(sp.ErrorCode), sp.BaseOffset, step.base)
		}
	}
	recs := consumeRecords(t, b.Addrs()[0], "legacy", 14)
	for i, r := range recs {
		wantTs := ts + int64(i)
		if i < 5 || i >= 12 { // magic 0 has no timestamp
			wantTs = -1
		}
		if r.Offset != int64(i) || string(r.Key) != fmt.Sprintf("k%d", i) || string(r.Value) != fmt.Sprintf("v%d", i) || r.Timestamp.UnixMilli() != wantTs {
			t.Fatalf("record %d: offset %d %s=%s at %d, want ts %d", i, r.Offset, r.Key, r.Value, r.Timestamp.UnixMilli(), wantTs)
		}
	}

	before := time.Now().UnixMilli()
	sp := produce(2, "legacy-lat", set(1, 2, 0))
	if sp.ErrorCode != 0 || sp.LogAppendTime < before {
		t.Fatalf("LogAppendTime topic: %v, log append time %d", kerr.ErrorForCode(sp.ErrorCode), sp.LogAppendTime)
	}
	for _, r := range consumeRecords(t, b.Addrs()[0], "legacy-lat", 2) {
		if r.Timestamp.UnixMilli() != sp.LogAppendTime || r.Attrs.TimestampType() != 1 {
			t.Fatalf("stamped record at %d (type %d), want %d", r.Timestamp.UnixMilli(), r.Attrs.TimestampType(), sp.LogAppendTime)
		}
	}

	corrupt := set(1, 1, 0)
	corrupt[len(corrupt)-1] ^= 0xff
	v2 := func() []byte { // a v2 batch, which v3+ must carry alone
		r := kmsg.RecordBatch{Magic: 2, NumRecords: 1, Records: []byte{}}
		return r.AppendTo(nil)
	}
	for _, tc := range []struct {
		version int16
		records []byte
		want    *kerr.Error
	}{
		{1, corrupt, kerr.CorruptMessage},
		{2, append(set(0, 1, 0), set(1, 1, 1)...), kerr.InvalidRecord},
		{3, set(1, 2, 0), kerr.InvalidRecord},
		{3, append(v2(), v2()...), kerr.InvalidRecord},
		{3, nil, kerr.InvalidRecord},
	} {
		if sp := produce(tc.version, "legacy", tc.records); sp.ErrorCode != tc.want.Code {
			t.Errorf("Produce v%d %d bytes: %v, want %v", tc.version, len(tc.records), kerr.ErrorForCode(sp.ErrorCode), tc.want)
		}
	}
}

// consumeRecords reads n records of partition 0 from the start with kgo.
func consumeRecords(t *testing.T, addr, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d records", topic, len(out), n)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch %s: %v", topic, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

// TestListOffsetsV0 sends the old-style request Burrow and old sarama
// send: segment offsets newest first, at most MaxNumOffsets of them.
func TestListOffsetsV0(t *testing.T) {
	b := startBroker(t, t.TempDir(), "log.segment.bytes=1024")
	cl := b.client(t, kgo.DefaultProduceTopic("old"))
	createTopic(t, cl, "old", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 30; i++ { // ~100-byte batches: a few segments
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: bytes.Repeat([]byte{'x'}, 40)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	segs := b.partition("old", 0).Log().NumSegments()
	if segs < 3 {
		t.Fatalf("%d segments, want several", segs)
	}
	c := dialRaw(t, b.Addrs()[0])
	list := func(replica int32, partition int32, ts int64, max int32) kmsg.ListOffsetsResponseTopicPartition {
		req := kmsg.NewPtrListOffsetsRequest()
		req.SetVersion(0)
		req.ReplicaID = replica
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "old"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.MaxNumOffsets = partition, ts, max
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return c.roundTrip(req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	latest := list(-1, 0, -1, 1)
	if latest.ErrorCode != 0 || !slices.Equal(latest.OldStyleOffsets, []int64{30}) {
		t.Fatalf("latest: %v %v", kerr.ErrorForCode(latest.ErrorCode), latest.OldStyleOffsets)
	}
	if e := list(-1, 0, -2, 1); !slices.Equal(e.OldStyleOffsets, []int64{0}) {
		t.Fatalf("earliest: %v", e.OldStyleOffsets)
	}
	all := list(-1, 0, -1, 100)
	if len(all.OldStyleOffsets) != segs+1 || all.OldStyleOffsets[0] != 30 || all.OldStyleOffsets[segs] != 0 ||
		!slices.IsSortedFunc(all.OldStyleOffsets, func(a, b int64) int { return int(b - a) }) {
		t.Fatalf("all segment offsets: %v for %d segments", all.OldStyleOffsets, segs)
	}
	if past := list(-1, 0, 1, 10); len(past.OldStyleOffsets) != 0 {
		t.Fatalf("before any segment: %v", past.OldStyleOffsets)
	}
	if future := list(-1, 0, time.Now().Add(time.Hour).UnixMilli(), 2); !slices.Equal(future.OldStyleOffsets, all.OldStyleOffsets[:2]) {
		t.Fatalf("in the future: %v", future.OldStyleOffsets)
	}
	if unknown := list(-1, 7, -1, 1); unknown.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown partition: %v", kerr.ErrorForCode(unknown.ErrorCode))
	}

	// v7's MAX_TIMESTAMP finds the record with the largest timestamp
	// (later than the records above, stamped now).
	base := time.UnixMilli(time.Now().Add(24 * time.Hour).UnixMilli())
	for i, d := range []time.Duration{3, 9, 1} {
		r := &kgo.Record{Value: []byte{byte(i)}, Timestamp: base.Add(d * time.Hour)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.SetVersion(8)
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "old"
	for _, ts := range []int64{maxTimestamp, earliestLocalTimestamp} {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp, rp.CurrentLeaderEpoch = ts, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	got := c.roundTrip(req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions
	if got[0].Offset != 31 || got[0].Timestamp != base.Add(9*time.Hour).UnixMilli() || got[1].Offset != 0 {
		t.Fatalf("max timestamp %+v, earliest local %+v", got[0], got[1])
	}
}

// requestsAt is how many requests of an API the broker decoded at a
// version (kafka_network_RequestsPerSec).
func requestsAt(b *testBroker, api string, version int16) float64 {
	var m dto.Metric
	b.metrics.requests.WithLabelValues(api, fmt.Sprint(version)).Write(&m)
	return m.GetCounter().GetValue()
}

// sawVersions fails unless the broker decoded requests of each API at the
// version given since the counts in before were taken.
func sawVersions(t *testing.T, b *testBroker, before map[string]float64, want map[string]int16) {
	t.Helper()
	for api, v := range want {
		if requestsAt(b, api, v) <= before[fmt.Sprint(api, v)] {
			t.Errorf("no %s v%d request reached the broker", api, v)
		}
	}
}

func countsOf(b *testBroker, want map[string]int16) map[string]float64 {
	out := map[string]float64{}
	for api, v := range want {
		out[fmt.Sprint(api, v)] = requestsAt(b, api, v)
	}
	return out
}

// saramaCases are the client Version settings old tools run with, the
// versions sarama speaks at each (its produce_set.go, consumer.go and
// offset_request.go) and a codec its protocol allows.
var saramaCases = []struct {
	version  sarama.KafkaVersion
	codec    sarama.CompressionCodec
	versions map[string]int16
}{
	{sarama.V0_10_0_0, sarama.CompressionNone, map[string]int16{"Produce": 2, "Fetch": 2, "ListOffsets": 0}},
	{sarama.V0_10_0_0, sarama.CompressionSnappy, map[string]int16{"Produce": 2, "Fetch": 2, "ListOffsets": 0}},
	{sarama.V0_11_0_0, sarama.CompressionGZIP, map[string]int16{"Produce": 3, "Fetch": 5, "ListOffsets": 2}},
	{sarama.V1_0_0_0, sarama.CompressionLZ4, map[string]int16{"Produce": 5, "Fetch": 6, "ListOffsets": 2}},
	{sarama.V2_0_0_0, sarama.CompressionNone, map[string]int16{"Produce": 6, "Fetch": 8, "ListOffsets": 3}},
	{sarama.V2_8_0_0, sarama.CompressionZSTD, map[string]int16{"Produce": 9, "Fetch": 12, "ListOffsets": 6}},
}

// TestSaramaVersions produces and consumes with sarama at old Version
// settings (0.10.0 speaks Produce v2 / Fetch v2 / ListOffsets v0 with
// message format v1) against one broker, checks kgo reads the same
// records, and that sarama 0.10 reads what kgo wrote compressed.
func TestSaramaVersions(t *testing.T) {
	b := startBroker(t, t.TempDir())
	addr := b.Addrs()[0]
	kcl := b.client(t)
	base := time.UnixMilli(1_700_000_000_000)
	for _, tc := range saramaCases {
		name := fmt.Sprintf("%s-%s", tc.version, tc.codec)
		t.Run(name, func(t *testing.T) {
			topic := "sarama-" + strings.ReplaceAll(name, ".", "_")
			createTopic(t, kcl, topic, 2, nil)
			before := countsOf(b, tc.versions)
			defer sawVersions(t, b, before, tc.versions)
			cfg := sarama.NewConfig()
			cfg.Version = tc.version
			cfg.Producer.Return.Successes = true
			cfg.Producer.RequiredAcks = sarama.WaitForAll
			cfg.Producer.Partitioner = sarama.NewManualPartitioner
			cfg.Producer.Compression = tc.codec
			cfg.Producer.Flush.Messages = 5 // several messages per request
			// and a flush of what is left below 5: the aggregator sends
			// its whole buffer at 5, so how many remain at the end
			// depends on how requests and sends interleave.
			cfg.Producer.Flush.Frequency = 20 * time.Millisecond
			cfg.Consumer.Return.Errors = true
			prod, err := sarama.NewAsyncProducer([]string{addr}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			const n = 60
			for i := 0; i < n; i++ {
				prod.Input() <- &sarama.ProducerMessage{Topic: topic, Partition: int32(i % 2), Key: sarama.StringEncoder(fmt.Sprintf("k%d", i)),
					Value: sarama.StringEncoder(fmt.Sprintf("v%d", i)), Timestamp: base.Add(time.Duration(i) * time.Second)}
			}
			next := map[int32]int64{}
			for i := 0; i < n; i++ {
				select {
				case m := <-prod.Successes():
					if m.Offset < 0 {
						t.Fatalf("acknowledged at offset %d", m.Offset)
					}
				case err := <-prod.Errors():
					t.Fatalf("sarama produce: %v", err)
				case <-time.After(20 * time.Second):
					t.Fatalf("%d of %d acknowledged", i, n)
				}
			}
			prod.Close()
			cons, err := sarama.NewConsumer([]string{addr}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			for p := int32(0); p < 2; p++ {
				pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
				if err != nil {
					t.Fatal(err)
				}
				for j := 0; j < n/2; j++ {
					select {
					case m := <-pc.Messages():
						i := j*2 + int(p)
						if m.Offset != next[p] || string(m.Key) != fmt.Sprintf("k%d", i) || string(m.Value) != fmt.Sprintf("v%d", i) ||
							!m.Timestamp.Equal(base.Add(time.Duration(i)*time.Second)) {
							t.Fatalf("partition %d: %d %s=%s at %v, want offset %d v%d", p, m.Offset, m.Key, m.Value, m.Timestamp, next[p], i)
						}
						next[p]++
					case err := <-pc.Errors():
						t.Fatal(err)
					case <-time.After(20 * time.Second):
						t.Fatalf("partition %d: %d of %d messages", p, j, n/2)
					}
				}
				pc.Close()
			}
			// kgo reads the stored v2 batches with the same offsets.
			got := consumeRecords(t, addr, topic, n/2)
			for j, r := range got[:n/2] {
				if r.Offset != int64(j) || string(r.Value) != fmt.Sprintf("v%d", j*2) || !r.Timestamp.Equal(base.Add(time.Duration(j*2)*time.Second)) {
					t.Fatalf("kgo record %d: %d %s at %v", j, r.Offset, r.Value, r.Timestamp)
				}
			}
		})
	}
	// sarama 0.10 reads what kgo compressed, down-converted.
	for name, codec := range map[string]kgo.CompressionCodec{"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression()} {
		topic := "kgo-to-sarama-" + name
		pcl := b.client(t, kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic(topic), kgo.ManualFlushing())
		createTopic(t, pcl, topic, 1, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for i := 0; i < 20; i++ {
			pcl.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("c%d %s", i, strings.Repeat("y", 100)))}, nil)
		}
		if err := pcl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		cfg := sarama.NewConfig()
		cfg.Version = sarama.V0_10_0_0
		cons, err := sarama.NewConsumer([]string{addr}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := cons.ConsumePartition(topic, 0, 5)
		if err != nil {
			t.Fatal(err)
		}
		for i := 5; i < 20; i++ {
			select {
			case m := <-pc.Messages():
				if m.Offset != int64(i) || !strings.HasPrefix(string(m.Value), fmt.Sprintf("c%d ", i)) {
					t.Fatalf("%s: offset %d = %s, want c%d at %d", topic, m.Offset, m.Value, i, i)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: message %d did not arrive", topic, i)
			}
		}
		pc.Close()
		cons.Close()
	}
}

// TestKcatOldProtocol runs librdkafka without ApiVersions, falling back to
// the 0.9.0 protocol (Metadata v0, Produce v1, Fetch v1, ListOffsets v0,
// message format v0), with each codec; and against a kafka.profile=0.10
// broker, whose ApiVersions make it pick 0.10.2's versions (Produce v2,
// Fetch v3, message format v1).
func TestKcatOldProtocol(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat not installed (make deps installs it): librdkafka's old protocol is not tested")
	}
	latest := startBroker(t, t.TempDir())
	old := startBroker(t, t.TempDir(), "kafka.profile=0.10")
	noApiVersions := []string{"-X", "api.version.request=false", "-X", "broker.version.fallback=0.9.0"}
	v09 := map[string]int16{"Produce": 1, "Fetch": 1, "ListOffsets": 0, "Metadata": 0}
	v0102 := map[string]int16{"Produce": 2, "Fetch": 3, "ListOffsets": 1, "Metadata": 2}
	for _, tc := range []struct {
		name     string
		b        *testBroker
		args     []string
		codec    string
		versions map[string]int16
	}{
		{"fallback-0.9.0-none", latest, noApiVersions, "none", v09},
		{"fallback-0.9.0-gzip", latest, noApiVersions, "gzip", v09},
		{"fallback-0.9.0-snappy", latest, noApiVersions, "snappy", v09},
		{"fallback-0.9.0-lz4", latest, noApiVersions, "lz4", v09},
		{"profile-0.10-none", old, nil, "none", v0102},
		{"profile-0.10-lz4", old, nil, "lz4", v0102},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.b.Addrs()[0]
			topic := "kcat-" + strings.ReplaceAll(tc.name, ".", "_")
			createTopic(t, tc.b.client(t), topic, 1, nil)
			before := countsOf(tc.b, tc.versions)
			defer sawVersions(t, tc.b, before, tc.versions)
			args := append([]string{"-b", addr, "-t", topic}, tc.args...)
			var in bytes.Buffer
			for i := 0; i < 500; i++ {
				fmt.Fprintf(&in, "k%d:v%d\n", i, i)
			}
			prod := exec.Command("kcat", append(args, "-P", "-K:", "-z", tc.codec, "-X", "acks=all", "-X", "linger.ms=5")...)
			prod.Stdin = &in
			if out, err := prod.CombinedOutput(); err != nil {
				t.Fatalf("kcat -P: %v\n%s", err, out)
			}
			out, err := exec.Command("kcat", append(args, "-C", "-o", "beginning", "-e", "-q", "-f", "%o %k=%s\n")...).Output()
			if err != nil {
				t.Fatalf("kcat -C: %v", err)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 500 {
				t.Fatalf("kcat read %d messages, want 500", len(lines))
			}
			for i, l := range lines {
				if want := fmt.Sprintf("%d k%d=v%d", i, i, i); l != want {
					t.Fatalf("message %d: %q, want %q", i, l, want)
				}
			}
			if recs := consumeRecords(t, addr, topic, 500); recs[499].Offset != 499 || string(recs[499].Value) != "v499" {
				t.Fatalf("kgo reads %d %s last", recs[499].Offset, recs[499].Value)
			}
		})
	}
}

// TestClusterTopicIDs: a topic's ID, chosen at creation, reaches every
// broker (UpdateMetadata v7) and serves the requests that name topics by
// ID: Metadata v12, Fetch v13+, DeleteTopics v6. A follower asked to
// produce (v10) or fetch (v16) names the leader and its endpoint (KIP-951).
func TestClusterTopicIDs(t *testing.T) {
	tc := startCluster(t, 3)
	conns := map[int32]*rawConn{}
	for id := range tc.brokers {
		conns[id] = dialRaw(t, fmt.Sprintf("127.0.0.1:%d", tc.ports[id]))
	}
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.SetVersion(7)
	ct.TimeoutMillis = 10000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "ids", 1, 3
	ct.Topics = append(ct.Topics, rt)
	created := conns[1].roundTrip(ct).(*kmsg.CreateTopicsResponse).Topics[0]
	if created.ErrorCode != 0 || created.TopicID == ([16]byte{}) {
		t.Fatalf("CreateTopics v7: %v, id %x", kerr.ErrorForCode(created.ErrorCode), created.TopicID)
	}
	id := created.TopicID
	metadataByID := func(c *rawConn, id [16]byte) kmsg.MetadataResponseTopic {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(12)
		mt := kmsg.NewMetadataRequestTopic()
		mt.TopicID = id
		req.Topics = append(req.Topics, mt)
		return c.roundTrip(req).(*kmsg.MetadataResponse).Topics[0]
	}
	var leader int32
	proctest.Eventually(t, 20*time.Second, "the topic ID on every broker", func() error {
		for b, c := range conns {
			mt := metadataByID(c, id)
			if mt.ErrorCode != 0 || mt.Topic == nil || *mt.Topic != "ids" || mt.TopicID != id || len(mt.Partitions) != 1 || mt.Partitions[0].Leader < 0 {
				return fmt.Errorf("broker %d: %v %v", b, kerr.ErrorForCode(mt.ErrorCode), mt.Topic)
			}
			leader = mt.Partitions[0].Leader
		}
		return nil
	})
	waitISR(t, tc.bootstrap()[0], "ids", 3)
	if mt := metadataByID(conns[1], [16]byte{7}); mt.ErrorCode != kerr.UnknownTopicID.Code || mt.Topic != nil {
		t.Fatalf("unknown topic ID: %v %v", kerr.ErrorForCode(mt.ErrorCode), mt.Topic)
	}
	v11 := kmsg.NewPtrMetadataRequest()
	v11.SetVersion(11)
	v11.Topics = []kmsg.MetadataRequestTopic{{TopicID: id}}
	if mt := conns[1].roundTrip(v11).(*kmsg.MetadataResponse).Topics[0]; mt.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("topic ID before v12: %v", kerr.ErrorForCode(mt.ErrorCode))
	}

	cl := tc.client(kgo.DefaultProduceTopic("ids"), kgo.RequiredAcks(kgo.AllISRAcks()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("by-id")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fetch := func(c *rawConn, version int16, id [16]byte) kmsg.FetchResponse {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(version)
		req.ReplicaID, req.MaxBytes, req.SessionEpoch = -1, 1<<20, -1
		ft := kmsg.NewFetchRequestTopic()
		ft.TopicID = id
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LastFetchedEpoch = 1<<20, -1, -1
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		return *c.roundTrip(req).(*kmsg.FetchResponse)
	}
	got := fetch(conns[leader], 13, id)
	if sp := got.Topics[0].Partitions[0]; got.Topics[0].TopicID != id || sp.ErrorCode != 0 || sp.HighWatermark != 1 || len(sp.RecordBatches) == 0 {
		t.Fatalf("Fetch v13 by ID from the leader: %+v", got.Topics[0])
	}
	if sp := fetch(conns[leader], 13, [16]byte{7}).Topics[0].Partitions[0]; sp.ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("Fetch of an unknown ID: %v", kerr.ErrorForCode(sp.ErrorCode))
	}
	follower := leader%3 + 1
	hint := fetch(conns[follower], 16, id)
	if sp := hint.Topics[0].Partitions[0]; sp.ErrorCode != kerr.NotLeaderForPartition.Code || sp.CurrentLeader.LeaderID != leader ||
		len(hint.Brokers) != 1 || hint.Brokers[0].NodeID != leader || hint.Brokers[0].Port != int32(tc.ports[leader]) {
		t.Fatalf("Fetch v16 from follower %d: %+v, brokers %+v", follower, sp, hint.Brokers)
	}
	pr := kmsg.NewPtrProduceRequest()
	pr.SetVersion(10)
	pr.Acks, pr.TimeoutMillis = 1, 5000
	ptopic := kmsg.NewProduceRequestTopic()
	ptopic.Topic = "ids"
	pp := kmsg.NewProduceRequestTopicPartition()
	batch := kmsg.RecordBatch{Magic: 2, NumRecords: 1, FirstTimestamp: 1, MaxTimestamp: 1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		Records: (&kmsg.Record{Value: []byte("x")}).AppendTo(nil)}
	pp.Records = batch.AppendTo(nil)
	binary.BigEndian.PutUint32(pp.Records[8:], uint32(len(pp.Records)-12))
	ptopic.Partitions = append(ptopic.Partitions, pp)
	pr.Topics = append(pr.Topics, ptopic)
	presp := conns[follower].roundTrip(pr).(*kmsg.ProduceResponse)
	if sp := presp.Topics[0].Partitions[0]; sp.ErrorCode != kerr.NotLeaderForPartition.Code || sp.CurrentLeader.LeaderID != leader || len(presp.Brokers) != 1 || presp.Brokers[0].NodeID != leader {
		t.Fatalf("Produce v10 to follower %d: %+v, brokers %+v", follower, sp, presp.Brokers)
	}

	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.SetVersion(6)
	dt.TimeoutMillis = 10000
	dt.Topics = []kmsg.DeleteTopicsRequestTopic{{TopicID: id}, {TopicID: [16]byte{7}}}
	dr := conns[1].roundTrip(dt).(*kmsg.DeleteTopicsResponse)
	if d := dr.Topics[0]; d.ErrorCode != 0 || d.Topic == nil || *d.Topic != "ids" || d.TopicID != id {
		t.Fatalf("DeleteTopics v6 by ID: %+v", d)
	}
	if d := dr.Topics[1]; d.ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("DeleteTopics v6 of an unknown ID: %v", kerr.ErrorForCode(d.ErrorCode))
	}
	proctest.Eventually(t, 20*time.Second, "the topic deleted everywhere", func() error {
		for b, c := range conns {
			if mt := metadataByID(c, id); mt.ErrorCode != kerr.UnknownTopicID.Code {
				return fmt.Errorf("broker %d still knows the ID: %v", b, kerr.ErrorForCode(mt.ErrorCode))
			}
		}
		return nil
	})
}

// TestApiVersionsKafka40 pins what kafka.profile 4.0 advertises
// (testdata/apiversions/4.0.txt) against a Kafka 4.0.0 broker's own API
// ranges: the maxima of the 4.0.0 release as franz-go's kversion records
// them, the minima KIP-896 raised. Every API a 4.0.0 broker lists that
// isrlab serves is listed, none beyond what 4.0.0 lists, never above its
// maximum; where isrlab serves less, the golden file says so. A request
// below a KIP-896 minimum closes the connection, as on 4.0.
func TestApiVersionsKafka40(t *testing.T) {
	release := kversion.V4_0_0()
	for k, a := range apis {
		rmax, ok := release.LookupMaxKeyVersion(k)
		switch {
		case !ok && a.v40.Max >= 0:
			t.Errorf("%s: declared in Kafka 4.0 (k40) but a 4.0.0 broker does not list it", a.name)
		case ok && a.v40.Max != rmax:
			t.Errorf("%s: k40 max v%d, Kafka 4.0.0 lists v%d", a.name, a.v40.Max, rmax)
		}
	}
	b := startBroker(t, t.TempDir(), "kafka.profile=4.0", "process.roles=")
	c := dialRaw(t, b.Addrs()[0])
	resp := c.apiVersions(3, "isrlab-test", "1.0")
	if resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions v3: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	ours := map[int16]kmsg.ApiVersionsResponseApiKey{}
	for _, k := range resp.ApiKeys {
		ours[k.ApiKey] = k
	}
	var out strings.Builder
	fmt.Fprintln(&out, "# ApiVersions with kafka.profile=4.0 (transaction.version 2, the consumer group protocol on), beside what a Kafka 4.0.0 broker lists")
	fmt.Fprintf(&out, "# %-33s %-8s %s\n", "API", "isrlab", "Kafka 4.0.0")
	keys := slices.Sorted(maps.Keys(apis))
	for _, k := range keys {
		a := apis[k]
		rmax, inRelease := release.LookupMaxKeyVersion(k)
		got, listed := ours[k]
		switch {
		case !inRelease && listed:
			t.Errorf("%s advertised; a Kafka 4.0.0 broker does not list it", a.name)
		case inRelease && !listed:
			t.Errorf("%s not advertised; a Kafka 4.0.0 broker lists it", a.name)
		case listed && (got.MinVersion != a.v40.Min || got.MaxVersion > rmax):
			t.Errorf("%s advertised v%d-%d outside Kafka 4.0.0's v%d-%d", a.name, got.MinVersion, got.MaxVersion, a.v40.Min, rmax)
		}
		name := fmt.Sprintf("%3d %s", k, kmsg.NameForKey(k))
		switch {
		case !inRelease:
			fmt.Fprintf(&out, "%-35s %-8s %s\n", name, "-", "- (not listed by a 4.0 broker; served for isrlab's own controller)")
		default:
			note := ""
			if got.MaxVersion < rmax {
				note = "  (behind)"
			}
			fmt.Fprintf(&out, "%-35s %-8s %d-%d%s\n", name, fmt.Sprintf("%d-%d", got.MinVersion, got.MaxVersion), a.v40.Min, rmax, note)
		}
	}
	scripttest.Golden(t, filepath.Join("testdata", "apiversions", "4.0.txt"), out.String())

	// Above the advertised ApiVersions (v4): v0, UNSUPPORTED_VERSION and
	// the ApiVersions entry.
	if fb := c.apiVersions(5, "isrlab-test", "1.0"); fb.ErrorCode != kerr.UnsupportedVersion.Code || len(fb.ApiKeys) != 1 || fb.ApiKeys[0].MaxVersion != 4 {
		t.Fatalf("ApiVersions v5: %v %+v", kerr.ErrorForCode(fb.ErrorCode), fb.ApiKeys)
	}
	// KIP-896: Fetch v3 and Metadata... below 4.0's minima close the
	// connection; the newest versions are answered.
	for _, req := range []kmsg.Request{
		func() kmsg.Request { r := kmsg.NewPtrFetchRequest(); r.SetVersion(3); return r }(),
		func() kmsg.Request { r := kmsg.NewPtrOffsetCommitRequest(); r.SetVersion(1); return r }(),
	} {
		c := dialRaw(t, b.Addrs()[0])
		c.send(req)
		if _, err := c.frame(false); !errors.Is(err, io.EOF) {
			t.Errorf("%s v%d: %v, want the connection closed", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
		}
	}
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(13)
	if resp := dialRaw(t, b.Addrs()[0]).roundTrip(md).(*kmsg.MetadataResponse); len(resp.Brokers) != 1 || resp.ErrorCode != 0 {
		t.Fatalf("Metadata v13: %+v", resp)
	}
	// ListOffsets v10: latest-tiered (-5, KIP-1005) has no offset without
	// tiered storage; earliest is the log start.
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.SetVersion(7)
	ct.TimeoutMillis = 10000
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "t", 1, 1
	ct.Topics = append(ct.Topics, ctt)
	if code := c.roundTrip(ct).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != 0 {
		t.Fatalf("CreateTopics: %v", kerr.ErrorForCode(code))
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.SetVersion(10)
	lo.ReplicaID = -1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "t"
	for _, ts := range []int64{latestTieredTimestamp, earliestTimestamp} {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp, rp.CurrentLeaderEpoch = ts, -1
		lt.Partitions = append(lt.Partitions, rp)
	}
	lo.Topics = append(lo.Topics, lt)
	var got []kmsg.ListOffsetsResponseTopicPartition
	proctest.Eventually(t, 10*time.Second, "ListOffsets on the new topic", func() error {
		got = c.roundTrip(lo).(*kmsg.ListOffsetsResponse).Topics[0].Partitions
		if got[0].ErrorCode != 0 || got[1].ErrorCode != 0 {
			return fmt.Errorf("%v %v", kerr.ErrorForCode(got[0].ErrorCode), kerr.ErrorForCode(got[1].ErrorCode))
		}
		return nil
	})
	if got[0].Offset != -1 || got[0].Timestamp != -1 || got[0].LeaderEpoch != -1 || got[1].Offset != 0 {
		t.Fatalf("latest tiered %+v, earliest %+v", got[0], got[1])
	}
}
