package ledger

import (
	"strings"
	"unicode/utf8"
)

// Text helpers that reproduce the JavaScript semantics the reference relies
// on implicitly (contract section 12): the WHATWG lossy UTF-8 decoder, the
// UTF-16 length of a preview, and the String.prototype.trim whitespace set.

const bom = "\uFEFF"

// previewUnits is the preview length of a corrupt line or a torn tail, in
// UTF-16 code units (contract 8.6).
const previewUnits = 120

// lossyDecode decodes b as the WHATWG UTF-8 decoder in replacement mode
// does (Node's Buffer.toString): each maximal subpart of an invalid
// sequence becomes ONE U+FFFD, so "\xE2\x82" is one replacement where Go's
// per-byte decoding would give two. A leading BOM is kept, as
// Buffer.toString keeps it, unless stripBOM asks for TextDecoder's
// behaviour.
func lossyDecode(b []byte, stripBOM bool) string {
	if stripBOM && len(b) >= 3 && string(b[:3]) == bom {
		b = b[3:]
	}
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	var (
		cp           rune
		needed, seen int
		lower, upper byte = 0x80, 0xBF
	)
	for i := 0; i < len(b); i++ {
		c := b[i]
		if needed == 0 {
			switch {
			case c < 0x80:
				sb.WriteByte(c)
			case c >= 0xC2 && c <= 0xDF:
				needed, cp = 1, rune(c&0x1F)
			case c >= 0xE0 && c <= 0xEF:
				if c == 0xE0 {
					lower = 0xA0
				} else if c == 0xED {
					upper = 0x9F
				}
				needed, cp = 2, rune(c&0x0F)
			case c >= 0xF0 && c <= 0xF4:
				if c == 0xF0 {
					lower = 0x90
				} else if c == 0xF4 {
					upper = 0x8F
				}
				needed, cp = 3, rune(c&0x07)
			default:
				sb.WriteRune(utf8.RuneError)
			}
			continue
		}
		if c < lower || c > upper {
			// The byte is not part of this sequence: replace what came
			// before it and decode the byte again on its own.
			cp, needed, seen, lower, upper = 0, 0, 0, 0x80, 0xBF
			sb.WriteRune(utf8.RuneError)
			i--
			continue
		}
		lower, upper = 0x80, 0xBF
		cp = cp<<6 | rune(c&0x3F)
		seen++
		if seen == needed {
			sb.WriteRune(cp)
			cp, needed, seen = 0, 0, 0
		}
	}
	if needed != 0 {
		sb.WriteRune(utf8.RuneError)
	}
	return sb.String()
}

// preview returns the first previewUnits UTF-16 code units of s, as
// String.prototype.slice(0, 120) does, except that a surrogate pair cut in
// half is dropped whole: a Go string cannot carry the lone high surrogate
// JavaScript would keep. The preview is not authoritative (the sha256 is).
func preview(s string) string {
	units := 0
	for i, r := range s {
		n := 1
		if r >= 0x10000 {
			n = 2
		}
		if units+n > previewUnits {
			return s[:i]
		}
		units += n
	}
	return s
}

// jsBlank reports whether s.trim() === "" in JavaScript: s holds only
// WhiteSpace and LineTerminator code points (ECMA-262 12.2, 12.3). This set
// differs from unicode.IsSpace: it includes U+FEFF and excludes U+0085.
func jsBlank(s string) bool {
	for _, r := range s {
		switch r {
		case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029,
			0x202F, 0x205F, 0x3000, 0xFEFF:
		default:
			if r < 0x2000 || r > 0x200A {
				return false
			}
		}
	}
	return true
}
