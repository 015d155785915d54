package executor

import (
	"unicode/utf16"
	"unicode/utf8"
)

// isJSSpace reports whether r is stripped by ECMAScript String.prototype.trim
// (WhiteSpace and LineTerminator, ECMA-262 sections 12.2 and 12.3). Unlike Go's
// unicode.IsSpace it includes U+FEFF and excludes U+0085 (contract 1.3, 12).
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// trimJS trims s as JS String.prototype.trim does.
func trimJS(s string) string {
	start := 0
	for start < len(s) {
		r, n := utf8.DecodeRuneInString(s[start:])
		if !isJSSpace(r) {
			break
		}
		start += n
	}
	end := len(s)
	for end > start {
		r, n := utf8.DecodeLastRuneInString(s[start:end])
		if !isJSSpace(r) {
			break
		}
		end -= n
	}
	return s[start:end]
}

// decodeLossy decodes b as UTF-8 with replacement the way the WHATWG
// decoder (and so Node's Buffer.toString) does: each maximal subpart of an
// ill-formed sequence becomes one U+FFFD, so a truncated 3-byte sequence is
// one replacement, not two (Unicode 15 section 3.9, "U+FFFD substitution of
// maximal subparts").
func decodeLossy(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		out = utf8.AppendRune(out, utf8.RuneError)
		i += maximalSubpart(b[i:])
	}
	return string(out)
}

// maximalSubpart returns the length (at least 1) of the longest prefix of b
// that starts a well-formed UTF-8 sequence but does not complete one.
func maximalSubpart(b []byte) int {
	lead := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // allowed range of the second byte
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		need = 1
	case lead == 0xE0:
		need, lo = 2, 0xA0
	case lead >= 0xE1 && lead <= 0xEC, lead == 0xEE, lead == 0xEF:
		need = 2
	case lead == 0xED:
		need, hi = 2, 0x9F
	case lead == 0xF0:
		need, lo = 3, 0x90
	case lead >= 0xF1 && lead <= 0xF3:
		need = 3
	case lead == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		c := b[n]
		if n == 1 && (c < lo || c > hi) || n > 1 && (c < 0x80 || c > 0xBF) {
			break
		}
	}
	return n
}

// tailUTF16 returns the last n UTF-16 code units of s, as JS s.slice(-n)
// does. A surrogate pair cut in half becomes U+FFFD (JS would keep a lone
// surrogate, which UTF-8 cannot hold).
func tailUTF16(s string, n int) string {
	u := utf16.Encode([]rune(s))
	if len(u) <= n {
		return s
	}
	return string(utf16.Decode(u[len(u)-n:]))
}
