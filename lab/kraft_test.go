package lab_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/lab"
)

// TestRunKRaftControllerKill runs the library's kraft/controller-kill,
// shortened, on the embedded default: the controller target resolves to
// the coordinator node running the active KRaft controller, not a broker,
// and killing it costs the writes nothing.
func TestRunKRaftControllerKill(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	sc, err := lab.Resolve("kraft/controller-kill")
	if err != nil {
		t.Fatal(err)
	}
	sc.Duration, sc.Seed = 14*time.Second, 7
	sc.Faults[0].At, sc.Faults[0].HealAfter = 4*time.Second, 5*time.Second
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	res, out := runLogged(t, bin, sc)
	if !regexp.MustCompile(`kill controller -> c[123]\b`).MatchString(out) {
		t.Fatalf("the controller target did not resolve to a coordinator node:\n%s", out)
	}
	if res.Verdict.Valid != checker.Valid || res.Judgement.Outcome != lab.Met {
		t.Fatalf("verdict %v, outcome %v; want valid and met", res.Verdict.Valid, res.Judgement)
	}
	if l := leftovers(t, res.RunID); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}
