package group

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestPartitionMatchesJava(t *testing.T) {
	f, err := os.Open("testdata/hash.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 3 {
			t.Fatalf("bad line %q", line)
		}
		hash, _ := strconv.ParseInt(cols[1], 10, 32)
		part, _ := strconv.ParseInt(cols[2], 10, 32)
		if got := JavaHashCode(cols[0]); got != int32(hash) {
			t.Errorf("JavaHashCode(%q) = %d, want %d", cols[0], got, hash)
		}
		if got := Partition(cols[0], 50); got != int32(part) {
			t.Errorf("Partition(%q, 50) = %d, want %d", cols[0], got, part)
		}
		n++
	}
	if n < 10 {
		t.Fatalf("only %d vectors", n)
	}
}
