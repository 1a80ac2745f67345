package lab

import (
	"errors"
	"fmt"
	"io/fs"
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
	Name        string
	Description string
	Expect      string // the expectation, in words
	Scenario    Scenario
}

// libraryDirs are the library's directories that hold no runnable scenario.
var libraryDirs = []string{"presets", "matrices"}

// List returns every scenario of the library, sorted by name. A scenario
// that does not load is an error naming it.
func List() ([]Entry, error) {
	var out []Entry
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
		if path.Ext(p) != ".yaml" {
			return nil
		}
		name := strings.TrimSuffix(p, ".yaml")
		s, err := Lookup(name)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		out = append(out, Entry{Name: name, Description: s.Description, Expect: s.Expect.String(), Scenario: s})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, errors.Join(errs...)
}

// Lookup loads the library scenario name ("seed000/leader-kill-safe").
func Lookup(name string) (Scenario, error) {
	name = strings.TrimSuffix(name, ".yaml")
	data, err := fs.ReadFile(Library, name+".yaml")
	if err != nil || slices.Contains(libraryDirs, strings.Split(name, "/")[0]) {
		return Scenario{}, fmt.Errorf("%w: no scenario %q in the library (isrlab scenarios lists them)", ErrScenario, name)
	}
	return Parse("scenarios/"+name+".yaml", name, data)
}

// Resolve finds what `isrlab run ARG` means: a file if one exists at arg,
// else a library scenario of that name.
func Resolve(arg string) (Scenario, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		return Load(arg)
	}
	if strings.ContainsRune(arg, os.PathSeparator) && strings.HasSuffix(arg, ".yaml") {
		if _, err := fs.Stat(Library, strings.TrimPrefix(arg, "scenarios/")); err != nil {
			return Scenario{}, fmt.Errorf("%w: %s: no such file, and no library scenario of that name", ErrScenario, arg)
		}
		arg = strings.TrimPrefix(arg, "scenarios/")
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
