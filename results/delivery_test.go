package results

import (
	"testing"
	"testing/fstest"
)

// TestRunReportDelivery: a run whose consumer group redelivered a record
// and skipped another shows one delivery plot for the group, each series
// ending at the checker's count; a run without delivery ops has none
// (TestRunReportPlots).
func TestRunReportDelivery(t *testing.T) {
	const h = `{"isrlab_history":1,"run":"d","topic":"t","partitions":1}
{"index":0,"time":10,"process":0,"type":"invoke","f":"send","value":1,"partition":0}
{"index":1,"time":20,"process":0,"type":"ok","f":"send","value":1,"partition":0,"offset":0}
{"index":2,"time":30,"process":0,"type":"invoke","f":"send","value":2,"partition":0}
{"index":3,"time":40,"process":0,"type":"ok","f":"send","value":2,"partition":0,"offset":1}
{"index":4,"time":50,"process":1,"type":"invoke","f":"subscribe","group":"g"}
{"index":5,"time":60,"process":1,"type":"ok","f":"subscribe","group":"g"}
{"index":6,"time":70,"process":1,"type":"invoke","f":"poll"}
{"index":7,"time":80,"process":1,"type":"ok","f":"poll","offsets":{"0":[[0,1],[1,2]]}}
{"index":8,"time":90,"process":1,"type":"ok","f":"processed","group":"g","value":1,"partition":0,"offset":0}
{"index":9,"time":1500000000,"process":1,"type":"ok","f":"commit","group":"g","committed":{"0":2}}
{"index":10,"time":1600000000,"process":1,"type":"info","f":"crash"}
{"index":11,"time":1700000000,"process":2,"type":"invoke","f":"subscribe","group":"g"}
{"index":12,"time":1800000000,"process":2,"type":"ok","f":"subscribe","group":"g"}
{"index":13,"time":1900000000,"process":2,"type":"ok","f":"processed","group":"g","value":1,"partition":0,"offset":0}
`
	page, err := RunReport(fstest.MapFS{HistoryFile: {Data: []byte(h)}}, "d")
	if err != nil {
		t.Fatal(err)
	}
	all := parseHTML(t, page)
	if n := len(find(all, "figure", "id", "plot-delivery-0")); n != 1 {
		t.Fatalf("%d delivery figures for group g, want 1", n)
	}
	want := map[string]string{"redelivered": "1", "skipped": "1"}
	for _, el := range find(plotElems(t, page, "delivery-0"), "polyline", "class", "series") {
		s := el.attrs["data-series"]
		if el.attrs["data-final"] != want[s] {
			t.Errorf("series %s ends at %s, want %s", s, el.attrs["data-final"], want[s])
		}
		delete(want, s)
	}
	if len(want) != 0 {
		t.Errorf("missing series %v", want)
	}
}
