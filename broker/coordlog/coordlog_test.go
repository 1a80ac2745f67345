package coordlog

import (
	"testing"

	klog "github.com/isrlab/isrlab/broker/log"
)

// TestBatches: the coordinators' batches, transactional and control ones
// included, pass the broker's own batch parser (CRC included) and decode
// back with their producer and flags.
func TestBatches(t *testing.T) {
	p := Producer{ID: 42, Epoch: 3, Transactional: true}
	data := Encode([]Record{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("t")}}, 1000, p)
	data = append(data, EncodeControl(Producer{ID: 42, Epoch: 3}, true, 7, 1001)...)
	data = append(data, Encode([]Record{{Key: []byte("plain"), Value: []byte("x")}}, 1002, NoProducer)...)
	infos, err := klog.ParseBatches(data, 1<<20)
	if err != nil || len(infos) != 3 {
		t.Fatalf("ParseBatches: %v %+v", err, infos)
	}
	if !infos[0].Transactional() || infos[0].Control() || !infos[1].Transactional() || !infos[1].Control() || infos[2].Transactional() {
		t.Fatalf("attributes %x %x %x", infos[0].Attributes, infos[1].Attributes, infos[2].Attributes)
	}
	type seen struct {
		b   Batch
		off int64
		r   Record
	}
	var got []seen
	// Offsets as the broker assigns them on append: here the batches keep
	// base offset 0, so records are numbered within each batch.
	if _, err := Decode(data, func(b Batch, off int64, r Record) error { got = append(got, seen{b, off, r}); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d records", len(got))
	}
	if g := got[0]; g.b.Producer != p || g.b.Control || string(g.r.Value) != "v" {
		t.Fatalf("first record %+v", g)
	}
	if got[1].r.Value != nil {
		t.Fatalf("tombstone decoded as %q", got[1].r.Value)
	}
	if g := got[2]; !g.b.Control || g.b.Producer.ID != 42 {
		t.Fatalf("control record %+v", g)
	}
	if typ, err := ControlType(got[2].r.Key); err != nil || typ != ControlCommit {
		t.Fatalf("control type %d %v", typ, err)
	}
	if g := got[3]; g.b.Producer != NoProducer || g.b.Control {
		t.Fatalf("plain record %+v", g)
	}
	if _, err := ControlType([]byte{0}); err == nil {
		t.Fatal("short control key accepted")
	}
}
