// Package mountinfo reads the kernel's list of mounts
// (/proc/self/mountinfo), which faultfs's clean-up and the nemesis's
// cgroup faults both search.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of mountinfo.
type Mount struct {
	Root       string // the path within the filesystem that is mounted
	MountPoint string
	FSType     string
	Source     string
	SuperOpts  string // the filesystem's options, comma-separated
}

// Read lists the mounts of this process's mount namespace.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads mountinfo lines:
// id parent major:minor root mountpoint opts [optional...] - fstype source superopts.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if sep < 0 || sep+2 >= len(fields) {
			continue
		}
		m := Mount{Root: Unescape(fields[3]), MountPoint: Unescape(fields[4]), FSType: fields[sep+1], Source: fields[sep+2]}
		if sep+3 < len(fields) {
			m.SuperOpts = fields[sep+3]
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

// Unescape undoes the kernel's octal escapes (\040 for a space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
