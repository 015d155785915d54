package ledger

import (
	"strings"
	"unicode/utf16"
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
// String.prototype.slice(0, 120) does: a surrogate pair cut in half leaves
// its high surrogate, which a Go string holds as its three-byte WTF-8 form
// (as the lexer keeps a lone surrogate escape, lex.go) and Text writes as
// JSON.stringify writes it, "\ud83d". The preview is not authoritative
// (the sha256 is).
func preview(s string) Text {
	units := 0
	for i, r := range s {
		n := 1
		if r >= 0x10000 {
			n = 2
		}
		if units+n > previewUnits {
			if n == 2 && units+1 == previewUnits {
				hi, _ := utf16.EncodeRune(r)
				return Text(s[:i] + string(wtf8(hi)))
			}
			return Text(s[:i])
		}
		units += n
	}
	return Text(s)
}

// wtf8 is the three-byte generalized UTF-8 form of a lone surrogate.
func wtf8(u rune) []byte {
	return []byte{0xE0 | byte(u>>12), 0x80 | byte(u>>6)&0x3F, 0x80 | byte(u)&0x3F}
}

// Text is a string as JavaScript holds it: UTF-8, except that a lone
// surrogate, which a JS string may hold and UTF-8 cannot, is kept as its
// three-byte WTF-8 form. Its JSON is JSON.stringify's (ES2019 well-formed
// stringify): the lone surrogate as a lower-case "\udxxx" escape; every
// other byte that is not UTF-8 as U+FFFD.
type Text string

// MarshalJSON quotes t as JSON.stringify quotes the JS string it stands for.
func (t Text) MarshalJSON() ([]byte, error) {
	s := string(t)
	b := []byte{'"'}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1 && isWTF8Surrogate(s[i:]):
			u := rune(s[i]&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F)
			b = append(b, '\\', 'u', hexDigits[u>>12&0xF], hexDigits[u>>8&0xF], hexDigits[u>>4&0xF], hexDigits[u&0xF])
			n = 3
		case r == utf8.RuneError && n <= 1:
			b = append(b, "\ufffd"...)
			n = 1
		default:
			b = appendJSStringBody(b, s[i:i+n])
		}
		i += n
	}
	return append(b, '"'), nil
}

// isWTF8Surrogate reports whether s starts with a surrogate's three-byte
// form: ED A0-BF 80-BF.
func isWTF8Surrogate(s string) bool {
	return len(s) >= 3 && s[0] == 0xED && s[1] >= 0xA0 && s[1] <= 0xBF && s[2] >= 0x80 && s[2] <= 0xBF
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
