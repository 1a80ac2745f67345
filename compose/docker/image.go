package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// libDirs are searched, in order, for a dynamically linked binary's libraries.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// rootfsFiles returns the files an image needs to run bin: bin itself at
// BinaryPath and, if it is dynamically linked (cgo), its ELF interpreter and
// shared libraries at their host paths. Keys are image paths, values host paths.
func rootfsFiles(bin string) (map[string]string, error) {
	files := map[string]string{BinaryPath: bin}
	var visit func(path string) error
	visit = func(path string) error {
		f, err := elf.Open(path)
		if err != nil {
			return fmt.Errorf("read ELF %s: %w", path, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return fmt.Errorf("read interpreter of %s: %w", path, err)
			}
			interp := string(bytes.TrimRight(b, "\x00"))
			files[interp] = interp
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			return nil // static
		}
		for _, lib := range libs {
			found := ""
			for _, d := range libDirs {
				if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
					found = filepath.Join(d, lib)
					break
				}
			}
			if found == "" {
				return fmt.Errorf("%s needs %s, not found in %v", path, lib, libDirs)
			}
			if _, seen := files[found]; seen {
				continue
			}
			files[found] = found
			if err := visit(found); err != nil {
				return err
			}
		}
		return nil
	}
	if err := visit(bin); err != nil {
		return nil, err
	}
	return files, nil
}

// rootfsTar writes a tarball holding files (symlinks resolved), the
// directories above them and an empty /tmp, and returns its SHA-256.
func rootfsTar(w io.Writer, files map[string]string) (string, error) {
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(w, h))
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	epoch := time.Unix(0, 0)
	addDir := func(d string, mode int64) error {
		if d == "/" || d == "." || dirs[d] {
			return nil
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: mode, ModTime: epoch})
	}
	if err := addDir("/tmp", 0o1777); err != nil {
		return "", err
	}
	for _, p := range paths {
		var parents []string
		for d := filepath.Dir(p); d != "/"; d = filepath.Dir(d) {
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			if err := addDir(parents[i], 0o755); err != nil {
				return "", err
			}
		}
		b, err := os.ReadFile(files[p]) // follows symlinks
		if err != nil {
			return "", fmt.Errorf("image file %s: %w", p, err)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p[1:], Mode: 0o755, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return "", err
		}
		if _, err := tw.Write(b); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// EnsureImage imports an image holding bin (and its libraries) unless one
// with the same content exists, and returns its reference. The tag is the
// content hash, so runs of the same binary share the image.
func EnsureImage(ctx context.Context, cli *client.Client, bin string) (string, error) {
	files, err := rootfsFiles(bin)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	sum, err := rootfsTar(&buf, files)
	if err != nil {
		return "", fmt.Errorf("build rootfs: %w", err)
	}
	ref := "isrlab-lab:" + sum[:16]
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	} else if !client.IsErrNotFound(err) {
		return "", fmt.Errorf("inspect image %s: %w", ref, err)
	}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref, image.ImportOptions{
		Changes: []string{"LABEL " + LabelManaged + "=true", `ENTRYPOINT []`, `CMD ["` + BinaryPath + `"]`},
		Message: "isrlab lab image",
	})
	if err != nil {
		return "", fmt.Errorf("import image: %w", err)
	}
	defer rc.Close()
	// The import finishes when its progress stream ends.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return "", fmt.Errorf("import image: %w", err)
	}
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", fmt.Errorf("import image %s: %w", ref, errors.Join(err, errors.New("not present after import")))
	}
	return ref, nil
}
