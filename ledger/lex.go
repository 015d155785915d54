package ledger

import (
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The lexical half of the scanner's JSON reader: literals, strings and
// numbers, each exactly as ECMA-404 (and so JSON.parse) defines them.

func (p *reader) literal() bool {
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(p.s)-p.i >= len(lit) && p.s[p.i:p.i+len(lit)] == lit {
			p.i += len(lit)
			return true
		}
	}
	return false
}

// skipStr validates a string without decoding it.
func (p *reader) skipStr() bool {
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return false
	}
	for i := p.i + 1; i < len(p.s); i++ {
		switch c := p.s[i]; {
		case c == '"':
			p.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if i+1 >= len(p.s) {
				return false
			}
			switch p.s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+5 >= len(p.s) || !isHex4(p.s[i+2:i+6]) {
					return false
				}
				i += 5
			default:
				return false
			}
		}
	}
	return false
}

// str reads a string and returns its value: a substring of the line when
// it holds no escape, else a decoded copy.
func (p *reader) str() (string, bool) {
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return "", false
	}
	start := p.i + 1
	for i := start; i < len(p.s); i++ {
		c := p.s[i]
		if c == '"' {
			p.i = i + 1
			return p.s[start:i], true
		}
		if c < 0x20 {
			return "", false
		}
		if c == '\\' {
			return p.unescape(start, i)
		}
	}
	return "", false
}

// unescape decodes a string with escapes, from start (after the quote);
// the first backslash is at i. A lone surrogate escape, which JSON.parse
// keeps as a lone UTF-16 unit, is kept as its 3-byte WTF-8 form so that two
// different lone surrogates never compare equal.
func (p *reader) unescape(start, i int) (string, bool) {
	b := append(p.scratch[:0], p.s[start:i]...)
	for i < len(p.s) {
		c := p.s[i]
		switch {
		case c == '"':
			p.i = i + 1
			p.scratch = b
			return string(b), true
		case c < 0x20:
			return "", false
		case c != '\\':
			b = append(b, c)
			i++
			continue
		}
		if i+1 >= len(p.s) {
			return "", false
		}
		esc := p.s[i+1]
		i += 2
		switch esc {
		case '"', '\\', '/':
			b = append(b, esc)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			if i+4 > len(p.s) || !isHex4(p.s[i:i+4]) {
				return "", false
			}
			r := rune(hex4(p.s[i : i+4]))
			i += 4
			if utf16.IsSurrogate(r) && r < 0xDC00 && i+6 <= len(p.s) &&
				p.s[i] == '\\' && p.s[i+1] == 'u' && isHex4(p.s[i+2:i+6]) {
				if lo := rune(hex4(p.s[i+2 : i+6])); lo >= 0xDC00 && lo <= 0xDFFF {
					b = utf8.AppendRune(b, utf16.DecodeRune(r, lo))
					i += 6
					continue
				}
			}
			if utf16.IsSurrogate(r) {
				b = append(b, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
			} else {
				b = utf8.AppendRune(b, r)
			}
		default:
			return "", false
		}
	}
	return "", false
}

func isHex4(s string) bool {
	for i := 0; i < 4; i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func hex4(s string) uint16 {
	var v uint16
	for i := 0; i < 4; i++ {
		c := s[i]
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		v = v<<4 | uint16(c)
	}
	return v
}

// numberText consumes a number per the JSON grammar:
// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
// simple reports an integer of at most 15 digits (exact in a float64).
func (p *reader) numberText() (simple bool, ok bool) {
	s, i := p.s, p.i
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := i
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return false, false
	}
	simple = i-digits <= 15
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return false, false
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		simple = false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return false, false
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		simple = false
	}
	p.i = i
	return simple, true
}

// number consumes a number and returns the float64 JSON.parse gives:
// correctly rounded, -0 kept, and a magnitude beyond float64 range as an
// infinity (strconv reports ErrRange there; JSON.parse gives Infinity).
func (p *reader) number() (float64, bool) {
	start := p.i
	simple, ok := p.numberText()
	if !ok {
		return 0, false
	}
	text := p.s[start:p.i]
	if simple {
		neg := text[0] == '-'
		if neg {
			text = text[1:]
		}
		var n int64
		for i := 0; i < len(text); i++ {
			n = n*10 + int64(text[i]-'0')
		}
		v := float64(n)
		if neg {
			v = math.Copysign(v, -1)
		}
		return v, true
	}
	v, _ := strconv.ParseFloat(text, 64)
	return v, true
}
