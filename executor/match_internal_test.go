package executor

import (
	"regexp"
	"strings"
	"testing"
)

// TestMatchersAgreeWithTheirRegexps: the hand-written checks accept
// exactly what the regexps they replaced accept.
func TestMatchersAgreeWithTheirRegexps(t *testing.T) {
	hex := strings.Repeat("0123456789abcdef", 4)
	cases := []string{
		"", "a", "A", "0", "_", "-", "a-b_C9", "a.b", "a b", "é", "a/b",
		strings.Repeat("x", 64), strings.Repeat("x", 65),
		"sha256:" + hex, "sha256:" + hex[:63], "sha256:" + hex + "0", "sha256:" + strings.ToUpper(hex),
		"sha512:" + hex, "SHA256:" + hex, "sha256:" + hex[:63] + "g",
		"img@sha256:" + hex, "docker.io/library/alpine:3@sha256:" + hex, "@sha256:" + hex,
		"a b@sha256:" + hex, "a\tb@sha256:" + hex, "a\vb@sha256:" + hex, "a@b@sha256:" + hex,
		"img@sha256:" + hex + "\n", "é@sha256:" + hex, "img@" + hex, "img",
	}
	for _, m := range []struct {
		re *regexp.Regexp
		fn func(string) bool
	}{
		{regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`), isToolName},
		{regexp.MustCompile(`^sha256:[0-9a-f]{64}$`), isSHA256Digest},
		{regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`), isPinnedImage},
	} {
		for _, s := range cases {
			if got, want := m.fn(s), m.re.MatchString(s); got != want {
				t.Errorf("%s on %q: %v, the regexp says %v", m.re, s, got, want)
			}
		}
	}
}
