package lab

import (
	"context"
	"fmt"
	"strings"
)

// DDTest reports whether the configuration made of the items keep (indices
// in ascending order) still fails. An error ends the search.
type DDTest func(ctx context.Context, keep []int) (bool, error)

// DDMin is Zeller's delta debugging (ddmin) over n items, all of which
// together are known to fail: it returns a 1-minimal failing subset (no
// single item of it can be dropped and the rest still fail, as far as test
// tells), trying each distinct subset at most once. It first tries the
// subsets of a split into gran parts, then their complements, and doubles
// gran when neither reduces; a subset that fails becomes the new
// configuration. With a non-deterministic test the result is a subset that
// failed at least once. On an error from test it returns the smallest
// failing subset found so far with the error.
func DDMin(ctx context.Context, n int, test DDTest) ([]int, error) {
	cur := make([]int, n)
	for i := range cur {
		cur[i] = i
	}
	seen := map[string]bool{key(cur): true}
	try := func(s []int) (bool, error) {
		k := key(s)
		if r, ok := seen[k]; ok {
			return r, nil
		}
		r, err := test(ctx, s)
		if err != nil {
			return false, err
		}
		seen[k] = r
		return r, nil
	}
	gran := 2
	for len(cur) >= 2 {
		parts := split(cur, gran)
		reduced := false
		for _, p := range parts {
			ok, err := try(p)
			if err != nil {
				return cur, err
			}
			if ok {
				cur, gran, reduced = p, 2, true
				break
			}
		}
		// With two parts each complement is the other part, tried above.
		if !reduced && gran > 2 {
			for _, p := range parts {
				c := minus(cur, p)
				ok, err := try(c)
				if err != nil {
					return cur, err
				}
				if ok {
					cur, gran, reduced = c, max(gran-1, 2), true
					break
				}
			}
		}
		if !reduced {
			if gran >= len(cur) {
				break
			}
			gran = min(2*gran, len(cur))
		}
	}
	return cur, nil
}

// split divides s into n parts of nearly equal size, in order.
func split(s []int, n int) [][]int {
	out := make([][]int, 0, n)
	for i := range n {
		lo, hi := i*len(s)/n, (i+1)*len(s)/n
		if hi > lo {
			out = append(out, s[lo:hi:hi])
		}
	}
	return out
}

// minus is s without the items of p (both ascending).
func minus(s, p []int) []int {
	out := make([]int, 0, len(s)-len(p))
	j := 0
	for _, x := range s {
		for j < len(p) && p[j] < x {
			j++
		}
		if j < len(p) && p[j] == x {
			continue
		}
		out = append(out, x)
	}
	return out
}

func key(s []int) string {
	var b strings.Builder
	for i, x := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, x)
	}
	return b.String()
}
