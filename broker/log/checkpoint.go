package log

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// errBadCheckpoint marks a checkpoint file that exists but cannot be parsed.
var errBadCheckpoint = errors.New("malformed checkpoint file")

// ErrLogDirOffline: a log directory whose checkpoint files (recovery
// point, log start offset, high watermark, a partition's leader epochs)
// cannot be read. Kafka's checkpoint reads turn such an IOException into a
// failed log directory (CheckpointFileWithFailureHandler.read, LogDirFailureChannel),
// and a broker with no online log directory left stops; so does this one:
// the broker refuses to start until the file is repaired or removed.
var ErrLogDirOffline = errors.New("log directory offline")

// offline is ErrLogDirOffline for dir, because of err.
func offline(dir string, err error) error {
	return fmt.Errorf("%w: %s: %v (repair or remove the file; a missing checkpoint is rebuilt)", ErrLogDirOffline, dir, err)
}

// readCheckpoint parses Kafka's checkpoint format: a version line "0", a
// count line, then count lines of exactly fields space-separated fields. A
// missing file yields no lines and no error.
func readCheckpoint(path string, fields int) ([][]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return strings.TrimSpace(sc.Text()), true
	}
	if v, ok := next(); !ok || v != "0" {
		return nil, fmt.Errorf("%s: version %q: %w", path, v, errBadCheckpoint)
	}
	c, ok := next()
	n, err := strconv.Atoi(c)
	if !ok || err != nil || n < 0 {
		return nil, fmt.Errorf("%s: count %q: %w", path, c, errBadCheckpoint)
	}
	out := make([][]string, 0, min(n, 1<<16))
	for i := 0; i < n; i++ {
		line, ok := next()
		if !ok {
			return nil, fmt.Errorf("%s: %d of %d entries: %w", path, i, n, errBadCheckpoint)
		}
		f := strings.Fields(line)
		if len(f) != fields {
			return nil, fmt.Errorf("%s: line %q: %w", path, line, errBadCheckpoint)
		}
		out = append(out, f)
	}
	return out, nil
}

// writeCheckpoint writes the version, count and lines atomically: a
// temporary file is written and fsynced, renamed over path, and the directory
// is fsynced so the rename survives a crash.
func writeCheckpoint(path string, lines []string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "0\n%d\n", len(lines))
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return writeFileAtomic(path, b.Bytes())
}

// writeFileAtomic replaces path with data: temporary file, fsync, rename,
// directory fsync.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write checkpoint %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync checkpoint %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close checkpoint %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename checkpoint: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

// syncDir fsyncs a directory so renames and creations in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir for sync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		// Some file systems (FUSE ones among them) cannot fsync a directory.
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.ENOTSUP) {
			return nil
		}
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
