package checker

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// TestDeliveryGolden: redelivered and skipped records, each found where it
// happened and not where it did not (a commit before processing that the
// member finished, a record polled twice and processed once, an info
// commit), and neither makes the history invalid.
func TestDeliveryGolden(t *testing.T) {
	tests := []struct {
		name                 string
		redelivered, skipped int64
		exOffset             int64
		exOps                int
		committed            int64 // the group's final committed offset of partition 0
	}{
		{name: "delivery-redelivered", redelivered: 1, exOffset: 0, exOps: 2, committed: 2},
		{name: "delivery-skipped", skipped: 1, exOffset: 1, exOps: 2, committed: 2},
		{name: "delivery-clean", committed: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", tc.name+".jsonl")
			v, err := Check(openFile(path), path, Options{Linearizable: LinOn})
			if err != nil {
				t.Fatal(err)
			}
			if v.Valid != Valid {
				t.Errorf("valid = %s, want true: delivery counts are not judged (anomalies %v)", v.Valid, v.Anomalies)
			}
			want := map[string]int64{}
			if tc.redelivered > 0 {
				want[Redelivered] = tc.redelivered
			}
			if tc.skipped > 0 {
				want[Skipped] = tc.skipped
			}
			if fmt.Sprint(v.Anomalies) != fmt.Sprint(want) {
				t.Errorf("anomalies = %v, want %v", v.Anomalies, want)
			}
			for kind := range want {
				ex := v.Examples[kind][0]
				if ex.Offset == nil || *ex.Offset != tc.exOffset || len(ex.Ops) != tc.exOps {
					t.Errorf("%s example: offset %v, %d ops, want offset %d, %d ops: %+v", kind, ex.Offset, len(ex.Ops), tc.exOffset, tc.exOps, ex)
				}
			}
			if v.Delivery == nil || len(v.Delivery.Groups) != 1 {
				t.Fatalf("delivery = %+v, want group g", v.Delivery)
			}
			g := v.Delivery.Groups[0]
			if g.Group != "g" || g.Redelivered != tc.redelivered || g.Skipped != tc.skipped {
				t.Errorf("group %+v", g)
			}
			if len(g.Committed) != 1 || g.Committed[0].Final != tc.committed {
				t.Errorf("committed timeline %+v, want final offset %d", g.Committed, tc.committed)
			}
			var perBucket int64
			for i := range g.RedeliveredPerBucket {
				perBucket += g.RedeliveredPerBucket[i] + g.SkippedPerBucket[i]
			}
			if perBucket != tc.redelivered+tc.skipped {
				t.Errorf("per-bucket counts sum to %d, want %d", perBucket, tc.redelivered+tc.skipped)
			}
			compareGolden(t, tc.name, v)
		})
	}
}

// TestDeliveryNamesAreAnomalies: expectations can name both counts.
func TestDeliveryNamesAreAnomalies(t *testing.T) {
	for _, k := range deliveryAnomalies {
		if !slices.Contains(AnomalyNames, k) {
			t.Errorf("%s is not in AnomalyNames", k)
		}
	}
}

// TestNoDeliveryWithoutProcessing: a history without processed records or
// commits naming offsets has no delivery section (old histories re-check
// the same).
func TestNoDeliveryWithoutProcessing(t *testing.T) {
	path := filepath.Join("testdata", "clean.jsonl")
	v, err := Check(openFile(path), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Delivery != nil {
		t.Errorf("delivery = %+v, want none", v.Delivery)
	}
}
