package results

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// CellLogName is the log of matrix cell cell in its matrix directory, in
// slash form (logs/<matrix>_<preset>_<schedule>.log, as CreateCellLog
// names it).
func CellLogName(matrix, cell string) string {
	return path.Join(LogsDir, strings.ReplaceAll(matrix+"/"+cell, "/", "_")+".log")
}

// CopyTree copies the directory (or file) src to dst, which must not
// exist: directories are made, symbolic links copied as links, and
// regular files hard-linked where src and dst share a file system, else
// copied. It is how a merge of matrix shards gathers their runs.
func CopyTree(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("copy %s: %s exists", src, dst)
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch t := d.Type(); {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case t.IsRegular():
			if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
				return err
			}
			if os.Link(p, to) == nil {
				return nil
			}
			return copyFile(p, to)
		}
		return nil // sockets, devices, FIFOs: not run files
	})
}

func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	_, err = io.Copy(out, in)
	return err
}
