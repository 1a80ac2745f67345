package netns

import (
	"os"
	"strings"
)

// InUserNS reports whether this process runs in a user namespace other than
// the initial one, i.e. as the "root" of a rootless re-execution.
func InUserNS() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	// The initial namespace maps the whole range: "0 0 4294967295".
	return !(len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295")
}
