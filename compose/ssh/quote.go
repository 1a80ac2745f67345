package ssh

import (
	"regexp"
	"strings"
)

var safeWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// Quote turns an argument list into the command line an SSH server hands
// to the login shell, each word single-quoted unless it is plainly safe, so
// that the remote program gets exactly argv: no word is split, globbed or
// expanded.
func Quote(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = quoteWord(a)
	}
	return strings.Join(words, " ")
}

func quoteWord(s string) string {
	if safeWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// script is argv running a fixed sh script with args as its positional
// parameters ($1, $2, ...): the way every multi-step remote operation is
// written, so that no input becomes shell text.
func script(body string, args ...string) []string {
	return append([]string{"sh", "-c", body, "sh"}, args...)
}
