package policies

import (
	"regexp"
	"testing"
)

// matcherCases are inputs at and around every edge of the byte classes.
var matcherCases = []string{
	"", "a", "A", "0", "_", "-", ".", "a.b", "a-b", "a_b", ".a", "-a", "_a", "0a", "a0",
	"ab cd", "ab\n", "\na", "é", "aé", "a/b", "a@b", "PATH", "path_2", "2PATH", "A-B",
	"000", "0777", "777", "0778", "08", "00000", "7", "77", "-777", "12a",
	string(make([]byte, 64)), "x" + string(make([]byte, 63)),
	"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl",  // 64
	"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklm", // 65
}

// TestMatchersAgreeWithTheirRegexps: the hand-written checks accept
// exactly what the regexps they replaced accept.
func TestMatchersAgreeWithTheirRegexps(t *testing.T) {
	for _, m := range []struct {
		re *regexp.Regexp
		fn func(string) bool
	}{
		{regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`), isName},
		{regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`), isEnvName},
		{regexp.MustCompile(`^[0-7]{3,4}$`), isMode},
	} {
		for _, s := range matcherCases {
			if got, want := m.fn(s), m.re.MatchString(s); got != want {
				t.Errorf("%s on %q: %v, the regexp says %v", m.re, s, got, want)
			}
		}
	}
}

// FuzzMatchers compares them on arbitrary input, and holds the egress
// entry parsers to their promises (checkEgressEntry).
func FuzzMatchers(f *testing.F) {
	for _, s := range append(matcherCases, egressCases...) {
		f.Add(s)
	}
	name := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	env := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	mode := regexp.MustCompile(`^[0-7]{3,4}$`)
	f.Fuzz(func(t *testing.T, s string) {
		if isName(s) != name.MatchString(s) || isEnvName(s) != env.MatchString(s) || isMode(s) != mode.MatchString(s) {
			t.Fatalf("a matcher disagrees with its regexp on %q", s)
		}
		if err := checkEgressEntry(s); err != nil {
			t.Fatal(err)
		}
	})
}
