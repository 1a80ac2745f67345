package lab

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"gopkg.in/yaml.v3"
)

// renamed is every name the library had before it was named after what
// happens, with the scenario it is now: each must keep working.
var renamed = []struct{ old, name string }{
	{"seed000/partition-1", "follower-cut-from-leader"},
	{"seed000/partition-2", "follower-cut-from-coordinators/safe"},
	{"seed000/partition-2-kafka-0.10", "follower-cut-from-coordinators/kafka-0.10"},
	{"seed000/partition-3", "leader-cut-from-followers"},
	{"seed000/partition-4-acks1", "zombie-leader/acks1"},
	{"seed000/partition-4-safe", "zombie-leader/safe"},
	{"seed000/partition-5", "leader-cut-from-brokers"},
	{"seed000/partition-6-acks1", "isolated-leader/acks1"},
	{"seed000/partition-6-safe", "isolated-leader/safe"},
	{"seed000/partition-7", "controller-cut-from-brokers"},
	{"seed000/partition-8", "controller-cut-from-coordinators/safe"},
	{"seed000/partition-8-acks1", "controller-cut-from-coordinators/acks1"},
	{"seed000/isr1-unclean-on", "unclean-election/on"},
	{"seed000/isr1-unclean-off", "unclean-election/off"},
	{"seed000/leader-kill-acks1", "lagging-followers/leader-kill-acks1"},
	{"seed000/leader-kill-safe", "lagging-followers/leader-kill-safe"},
	{"seed000/min-isr-refuses", "min-insync-replicas/refuses"},
	{"seed000/preferred-imbalance", "preferred-leader/rebalance"},
	{"seed000/preferred-imbalance-off", "preferred-leader/no-rebalance"},
	{"seed003/auto-commit-duplicates", "consumer-crash/auto-commit"},
	{"seed003/manual-commit", "consumer-crash/manual-commit"},
	{"kip101/hw-truncation", "restart-truncation/high-watermark"},
	{"kip101/epoch", "restart-truncation/leader-epoch"},
	{"zk-era-acks1-leader-kill", "unclean-election/kafka-0.10-acks1"},
}

// TestLibraryAliases: every old name loads the renamed scenario, by
// Lookup, Resolve (also as scenarios/OLD.yaml), Source and SelectLibrary;
// the old directories select the same scenarios as before; isrlab
// scenarios lists each scenario once, its old name in its description.
func TestLibraryAliases(t *testing.T) {
	ents, err := List()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Entry{}
	for _, e := range ents {
		byName[e.Name] = e
	}
	olddirs := map[string][]string{}
	for _, r := range renamed {
		if _, ok := byName[r.old]; ok {
			t.Errorf("%s is still listed under its old name", r.old)
		}
		e, ok := byName[r.name]
		if !ok {
			t.Errorf("%s: no scenario %s", r.old, r.name)
			continue
		}
		if !slices.Contains(e.Aliases, r.old) || !strings.Contains(e.Description, r.old) {
			t.Errorf("%s: aliases %v, description %q: want the old name %s in both", r.name, e.Aliases, e.Description, r.old)
		}
		for _, arg := range []string{r.old, r.old + ".yaml", "scenarios/" + r.old + ".yaml"} {
			sc, err := Resolve(arg)
			if err != nil || sc.Name != r.name || len(sc.Faults) != len(e.Scenario.Faults) {
				t.Errorf("Resolve(%s) = %s, %v; want %s", arg, sc.Name, err, r.name)
			}
		}
		if sc, err := Lookup(r.old); err != nil || sc.Name != r.name {
			t.Errorf("Lookup(%s) = %s, %v; want %s", r.old, sc.Name, err, r.name)
		}
		if file, _, err := Source(r.old); err != nil || file != "scenarios/"+r.name+".yaml" {
			t.Errorf("Source(%s) = %s, %v", r.old, file, err)
		}
		if dir, _, ok := strings.Cut(r.old, "/"); ok {
			olddirs[dir] = append(olddirs[dir], r.name)
		}
		sel, err := SelectLibrary([]string{r.old, r.name})
		if err != nil || len(sel) != 1 || sel[0].Name != r.name {
			t.Errorf("SelectLibrary(%s, %s): %d scenarios, %v", r.old, r.name, len(sel), err)
		}
	}
	// The old directories hold what they held: 19, 2 and 2 scenarios.
	for dir, want := range olddirs {
		for _, arg := range []string{dir, dir + "/"} {
			sel, err := SelectLibrary([]string{arg})
			var got []string
			for _, s := range sel {
				got = append(got, s.Name)
			}
			slices.Sort(got)
			slices.Sort(want)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("SelectLibrary(%s) = %v, %v\nwant %v", arg, got, err, want)
			}
		}
	}
	if len(olddirs["seed000"]) != 19 || len(olddirs["seed003"]) != 2 || len(olddirs["kip101"]) != 2 {
		t.Errorf("old directories: %v", olddirs)
	}
	// A matrix schedule takes the faults of a scenario by its old name.
	mf := filepath.Join(t.TempDir(), "m.yaml")
	os.WriteFile(mf, []byte("name: m\npresets: [safe]\nschedules:\n  - name: zombie\n    from: seed000/partition-4-safe\n"), 0o644)
	m, err := LoadMatrix(mf)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := yaml.Marshal(byName["zombie-leader/safe"].Scenario.Faults)
	if len(m.Cells) != 1 {
		t.Fatalf("%d cells", len(m.Cells))
	}
	if got, _ := yaml.Marshal(m.Cells[0].Scenario.Faults); !bytes.Equal(got, want) || !bytes.Contains(got, []byte("leader-coordinators")) {
		t.Errorf("from: seed000/partition-4-safe: faults\n%s\nwant zombie-leader/safe's\n%s", got, want)
	}
	// The default keeps its name, and nothing else answers to it.
	if sel, err := SelectLibrary([]string{DefaultName}); err != nil || len(sel) != 1 || sel[0].Name != DefaultName {
		t.Errorf("SelectLibrary(%s): %d scenarios, %v", DefaultName, len(sel), err)
	}
}

// TestLibraryNamesUnique: no two scenarios share a name or an alias, and
// no name or alias is the directory of another; a library breaking that
// is refused.
func TestLibraryNamesUnique(t *testing.T) {
	ix, err := libraryIndex()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, n := range ix.names {
		seen[n] = n
	}
	for a, n := range ix.aliases {
		if prev, ok := seen[a]; ok {
			t.Errorf("%s names both %s and %s", a, prev, n)
		}
		seen[a] = n
	}
	if len(ix.aliases) < len(renamed) {
		t.Errorf("%d aliases, want at least %d", len(ix.aliases), len(renamed))
	}

	saved := Library
	defer func() { Library = saved }()
	const body = "cluster: {coordinators: 1, brokers: 3}\ntopic: {partitions: 1}\nduration: 10s\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"alias-twice", map[string]string{"a.yaml": "aliases: [old/x]\n", "b.yaml": "aliases: [old/x]\n"}, "alias old/x: both a and b list it"},
		{"alias-is-a-name", map[string]string{"a.yaml": "aliases: [b]\n", "b.yaml": ""}, "alias b of a is also a scenario's name"},
		{"file-and-directory", map[string]string{"a.yaml": "", "a/b.yaml": ""}, "scenario a is also the directory of a/b"},
		{"alias-and-directory", map[string]string{"a.yaml": "aliases: [old]\n", "b.yaml": "aliases: [old/y]\n"}, "alias old of a is also the directory of old/y"},
		{"alias-with-yaml", map[string]string{"a.yaml": "aliases: [old.yaml]\n"}, "not a scenario name"},
		{"alias-a-preset", map[string]string{"a.yaml": "aliases: [presets/x]\n"}, "presets/ holds no scenarios"},
	} {
		fsys := fstest.MapFS{}
		for f, b := range tc.files {
			fsys[f] = &fstest.MapFile{Data: []byte(body + b)}
		}
		Library = fsys
		_, err := List()
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant one containing %q", tc.name, err, tc.want)
		}
	}
}
