package faultfs

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCrashModel runs seeded random writes, appends, truncations, fsyncs and
// crashes on a few files and checks after every crash that each file holds
// exactly its content as of its last fsync, as a model says.
func TestCrashModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		pt   bool
		ops  []string // operation kinds drawn from
	}{
		// Overwrites, truncations (with holes) and large writes that go to
		// the spill file, all through faultfs.
		{"hooked", false, []string{"write", "write", "append", "append", "truncate", "fsync", "big"}},
		// Appends by passthrough, truncations through faultfs.
		{"passthrough", true, []string{"append", "append", "append", "truncate", "fsync"}},
	} {
		for seed := int64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed-%d", tc.name, seed), func(t *testing.T) {
				f, backing, mnt := mountT(t, tc.pt)
				rng := rand.New(rand.NewSource(seed))
				const files = 3
				cur := make([][]byte, files)
				synced := make([][]byte, files)
				for i := range files {
					cur[i] = randBytes(rng, 5000)
					synced[i] = bytes.Clone(cur[i])
					if err := os.WriteFile(filepath.Join(backing, fmt.Sprint(i)), cur[i], 0o644); err != nil {
						t.Fatal(err)
					}
				}
				check := func(step int) {
					t.Helper()
					for i := range files {
						got, err := os.ReadFile(filepath.Join(mnt, fmt.Sprint(i)))
						if err != nil {
							t.Fatalf("step %d: %v", step, err)
						}
						if !bytes.Equal(got, synced[i]) {
							t.Fatalf("step %d: file %d has %d bytes, want its %d synced bytes (first difference at %d)",
								step, i, len(got), len(synced[i]), firstDiff(got, synced[i]))
						}
					}
				}
				for step := range 250 {
					i := rng.Intn(files)
					p := filepath.Join(mnt, fmt.Sprint(i))
					if rng.Intn(25) == 0 {
						if rep := f.Crash(); len(rep.Errors) > 0 {
							t.Fatalf("step %d: crash errors %v", step, rep.Errors)
						}
						copy(cur, cloneAll(synced))
						check(step)
						continue
					}
					switch op := tc.ops[rng.Intn(len(tc.ops))]; op {
					case "write", "big":
						n := 1 + rng.Intn(16<<10)
						if op == "big" {
							n = 1<<20 + rng.Intn(1<<20)
						}
						off := rng.Intn(len(cur[i]) + 4096)
						data := randBytes(rng, n)
						fh, err := os.OpenFile(p, os.O_WRONLY, 0)
						if err != nil {
							t.Fatal(err)
						}
						if _, err := fh.WriteAt(data, int64(off)); err != nil {
							t.Fatal(err)
						}
						fh.Close()
						cur[i] = resize(cur[i], max(len(cur[i]), off+n))
						copy(cur[i][off:], data)
					case "append":
						data := randBytes(rng, 1+rng.Intn(8<<10))
						fh, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
						if err != nil {
							t.Fatal(err)
						}
						if _, err := fh.Write(data); err != nil {
							t.Fatal(err)
						}
						fh.Close()
						cur[i] = append(cur[i], data...)
					case "truncate":
						n := rng.Intn(len(cur[i]) + 8192)
						if err := os.Truncate(p, int64(n)); err != nil {
							t.Fatal(err)
						}
						cur[i] = resize(cur[i], n)
					case "fsync":
						fh, err := os.Open(p)
						if err != nil {
							t.Fatal(err)
						}
						if err := fh.Sync(); err != nil {
							t.Fatal(err)
						}
						fh.Close()
						synced[i] = bytes.Clone(cur[i])
					}
				}
				f.Crash()
				check(-1)
			})
		}
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	rng.Read(b)
	return b
}

// resize grows b with zeros or cuts it to n bytes.
func resize(b []byte, n int) []byte {
	if n <= len(b) {
		return b[:n:n]
	}
	return append(b, make([]byte, n-len(b))...)
}

func cloneAll(bs [][]byte) [][]byte {
	out := make([][]byte, len(bs))
	for i, b := range bs {
		out[i] = bytes.Clone(b)
	}
	return out
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestNamespaceModel runs seeded random creates, unlinks, renames (also
// over existing files) and directory fsyncs in one directory, crashing now
// and then: after a crash the directory must list exactly the names of its
// last fsync, each with its file's content as of that file's last fsync
// (empty for files created since the start).
func TestNamespaceModel(t *testing.T) {
	for seed := int64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			f, backing, mnt := mountT(t, seed%2 == 0)
			rng := rand.New(rand.NewSource(seed))
			names := []string{"a", "b", "c", "d", "e"}
			content := map[int]string{} // inode -> durable content
			cur := map[string]int{}     // name -> inode
			for i, n := range names[:3] {
				content[i] = "initial-" + n
				cur[n] = i
				if err := os.WriteFile(filepath.Join(backing, n), []byte(content[i]), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			next := 3
			durable := maps.Clone(cur)
			for step := range 300 {
				a, b := names[rng.Intn(len(names))], names[rng.Intn(len(names))]
				_, aExists := cur[a]
				switch r := rng.Intn(10); {
				case r < 3 && !aExists:
					if err := os.WriteFile(filepath.Join(mnt, a), []byte("unsynced"), 0o644); err != nil {
						t.Fatal(err)
					}
					content[next] = "" // never fsynced
					cur[a] = next
					next++
				case r < 5 && aExists:
					if err := os.Remove(filepath.Join(mnt, a)); err != nil {
						t.Fatal(err)
					}
					delete(cur, a)
				case r < 8 && aExists && a != b:
					if err := os.Rename(filepath.Join(mnt, a), filepath.Join(mnt, b)); err != nil {
						t.Fatal(err)
					}
					cur[b] = cur[a]
					delete(cur, a)
				case r == 8:
					fh, err := os.Open(mnt)
					if err != nil {
						t.Fatal(err)
					}
					if err := fh.Sync(); err != nil {
						t.Fatal(err)
					}
					fh.Close()
					durable = maps.Clone(cur)
				case r == 9:
					if rep := f.Crash(); len(rep.Errors) > 0 {
						t.Fatalf("step %d: crash errors %v", step, rep.Errors)
					}
					cur = maps.Clone(durable)
					ents, err := os.ReadDir(mnt)
					if err != nil {
						t.Fatal(err)
					}
					var got []string
					for _, e := range ents {
						got = append(got, e.Name())
					}
					want := slices.Sorted(maps.Keys(durable))
					if !slices.Equal(got, want) {
						t.Fatalf("step %d: after crash the directory lists %q, want %q", step, got, want)
					}
					for n, ino := range durable {
						data, err := os.ReadFile(filepath.Join(mnt, n))
						if err != nil || string(data) != content[ino] {
							t.Fatalf("step %d: %s holds %q (%v), want %q", step, n, data, err, content[ino])
						}
					}
				}
			}
		})
	}
}
