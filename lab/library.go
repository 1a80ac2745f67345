package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/scenarios"
)

// Library is the embedded scenario library (scenarios/ in the source tree).
var Library fs.FS = scenarios.FS

// Entry is one scenario of the library.
type Entry struct {
	Name string
	// Aliases are the names it had before (Scenario.Aliases).
	Aliases []string
	// Description is the scenario's, followed by "(was OLD)" when it has
	// aliases, so that a user who knows the old name finds it.
	Description string
	Expect      string // the expectation, in words
	Scenario    Scenario
}

// libraryDirs are the library's directories that hold no runnable scenario.
var libraryDirs = []string{"presets", "matrices"}

// List returns every scenario of the library, sorted by name, each once
// under its name (its aliases in Entry.Aliases). A scenario that does not
// load is an error naming it, and so is a name or alias that two
// scenarios share (libraryIndex).
func List() ([]Entry, error) {
	ix, err := libraryIndex()
	if ix == nil {
		return nil, err
	}
	errs := []error{err}
	var out []Entry
	for _, name := range ix.names {
		s, err := parseLibrary(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		desc := s.Description
		if len(s.Aliases) > 0 {
			desc = strings.TrimSpace(desc + " (was " + strings.Join(s.Aliases, ", ") + ")")
		}
		out = append(out, Entry{Name: name, Aliases: s.Aliases, Description: desc, Expect: s.Expect.String(), Scenario: s})
	}
	return out, errors.Join(errs...)
}

// index is the library's names: each scenario's (its file's path without
// .yaml) and the aliases its file lists.
type index struct {
	names   []string          // sorted
	aliases map[string]string // alias -> the scenario's name
}

// libraryIndex reads every scenario file's aliases. A name or alias that
// two scenarios share, or one that is the directory of another (leader-kill
// beside leader-kill/x: "isrlab scenarios verify leader-kill" would select
// both), is an error; the index is returned with it.
func libraryIndex() (*index, error) {
	ix := &index{aliases: map[string]string{}}
	var errs []error
	err := fs.WalkDir(Library, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if slices.Contains(libraryDirs, p) {
				return fs.SkipDir
			}
			return nil
		}
		name, ok := strings.CutSuffix(p, ".yaml")
		if !ok {
			return nil
		}
		ix.names = append(ix.names, name)
		data, err := fs.ReadFile(Library, p)
		if err != nil {
			return err
		}
		var doc struct {
			Aliases Names `yaml:"aliases"`
		}
		if yaml.Unmarshal(data, &doc) != nil {
			return nil // parseLibrary reports it
		}
		for _, a := range doc.Aliases {
			if prev, ok := ix.aliases[a]; ok {
				errs = append(errs, fmt.Errorf("%w: alias %s: both %s and %s list it", ErrScenario, a, prev, name))
				continue
			}
			ix.aliases[a] = name
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ix.names)
	all := slices.Concat(ix.names, slices.Collect(maps.Keys(ix.aliases)))
	slices.Sort(all)
	for i, a := range all {
		what := "scenario " + a
		if n, ok := ix.aliases[a]; ok {
			what = "alias " + a + " of " + n
		}
		switch {
		case a == "" || path.Clean(a) != a || strings.HasSuffix(a, ".yaml") || strings.HasPrefix(a, "scenarios/"):
			errs = append(errs, fmt.Errorf("%w: %s: not a scenario name (a path inside scenarios/, without .yaml)", ErrScenario, what))
		case slices.Contains(libraryDirs, strings.Split(a, "/")[0]):
			errs = append(errs, fmt.Errorf("%w: %s: %s/ holds no scenarios", ErrScenario, what, strings.Split(a, "/")[0]))
		case i > 0 && all[i-1] == a:
			errs = append(errs, fmt.Errorf("%w: %s is also a scenario's name", ErrScenario, what))
		}
		for _, b := range all[i+1:] {
			if strings.HasPrefix(b, a+"/") {
				errs = append(errs, fmt.Errorf("%w: %s is also the directory of %s", ErrScenario, what, b))
			}
		}
	}
	return ix, errors.Join(errs...)
}

// Canonical returns the name of the library scenario name or alias names
// ("seed000/partition-4-acks1" -> "zombie-leader/acks1").
func Canonical(name string) (string, error) {
	name = strings.TrimSuffix(name, ".yaml")
	if slices.Contains(libraryDirs, strings.Split(name, "/")[0]) {
		return "", noScenario(name)
	}
	if st, err := fs.Stat(Library, name+".yaml"); err == nil && !st.IsDir() {
		return name, nil
	}
	ix, err := libraryIndex()
	if ix == nil {
		return "", err
	}
	if n, ok := ix.aliases[name]; ok {
		return n, nil
	}
	return "", noScenario(name)
}

func noScenario(name string) error {
	return fmt.Errorf("%w: no scenario %q in the library (isrlab scenarios lists them)", ErrScenario, name)
}

// Source returns the file of the library scenario name (or alias), as
// scenarios/NAME.yaml, and its text.
func Source(name string) (file string, data []byte, err error) {
	name, err = Canonical(name)
	if err != nil {
		return "", nil, err
	}
	data, err = fs.ReadFile(Library, name+".yaml")
	return "scenarios/" + name + ".yaml", data, err
}

// Lookup loads the library scenario name ("zombie-leader/acks1") or one
// of its aliases ("seed000/partition-4-acks1"); either way the scenario
// is named by its name, and so are its runs' results directories.
func Lookup(name string) (Scenario, error) {
	name, err := Canonical(name)
	if err != nil {
		return Scenario{}, err
	}
	return parseLibrary(name)
}

// parseLibrary parses the library file of scenario name.
func parseLibrary(name string) (Scenario, error) {
	file, data, err := Source(name)
	if err != nil {
		return Scenario{}, err
	}
	return Parse(file, name, data)
}

// Resolve finds what `isrlab run ARG` means: a file if one exists at arg,
// else a library scenario of that name or alias (scenarios/NAME.yaml
// too, as the source tree spells it).
func Resolve(arg string) (Scenario, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		return Load(arg)
	}
	if strings.ContainsRune(arg, os.PathSeparator) && strings.HasSuffix(arg, ".yaml") {
		name := strings.TrimPrefix(arg, "scenarios/")
		if _, err := Canonical(name); err != nil {
			return Scenario{}, fmt.Errorf("%w: %s: no such file, and no library scenario of that name", ErrScenario, arg)
		}
		arg = name
	}
	return Lookup(arg)
}

// Presets lists the library's presets.
func Presets() []string {
	ents, _ := fs.ReadDir(Library, "presets")
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, n)
		}
	}
	return out
}

// presetNode reads preset name's document.
func presetNode(name string) (*yaml.Node, error) {
	data, err := fs.ReadFile(Library, "presets/"+name+".yaml")
	if err != nil {
		return nil, fmt.Errorf("no preset %q (presets: %s)", name, strings.Join(Presets(), ", "))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("preset %s: %v", name, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("preset %s is not a mapping", name)
	}
	return doc.Content[0], nil
}

// readLibrary reads a file of the library.
func readLibrary(name string) ([]byte, error) { return fs.ReadFile(Library, name) }
