package executor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is JSON as the reference's JavaScript sees it: parseJS is
// JSON.parse (ECMA-262 25.5.1) and appendStable the reference's canonical
// form (hashArgs' stableStringify, equal to core's RFC 8785 serializer for
// any value JSON.parse makes). Go's encoding/json differs where the
// reference hashes what Go refuses or rewrites: a duplicate member is
// last-wins in JS, a lone surrogate escape ("\ud800") is a string of one
// UTF-16 unit in JS but U+FFFD in Go, and object members sort by UTF-16
// units, not UTF-8 bytes (contract sections 4 and 12).

// maxJSDepth bounds the nesting parseJS accepts, so that a hostile
// document cannot exhaust the stack. The reference's recursive
// stableStringify throws RangeError after a few thousand levels (about
// 1000 to 5000 on Node 20), so every document the reference hashes is
// within it.
const maxJSDepth = 10000

type jsKind uint8

const (
	jsNull jsKind = iota
	jsFalse
	jsTrue
	jsNumber
	jsString
	jsArray
	jsObject
)

// jsValue is one value JSON.parse made. A string is its UTF-16 code units
// (a JS string may hold lone surrogates, which UTF-8 cannot).
type jsValue struct {
	kind  jsKind
	num   float64
	str   []uint16
	elems []*jsValue
	// members maps a key's UTF-16 units, big-endian (so that byte order is
	// code-unit order), to its value: the last one of a duplicated key.
	members map[string]*jsValue
}

// errJSDepth is parseJS refusing a document nested deeper than maxJSDepth.
var errJSDepth = errors.New("nested more than 10000 levels deep")

// jsParser parses valid UTF-8 text.
type jsParser struct {
	s     string
	i     int
	depth int
}

// parseJS parses doc as JSON.parse parses the string Node decodes from
// those bytes (Buffer.toString: ill-formed UTF-8 becomes U+FFFD, one per
// maximal subpart; a byte order mark stays and is not JSON).
func parseJS(doc []byte) (*jsValue, error) {
	p := &jsParser{s: decodeLossy(doc)}
	p.space()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i < len(p.s) {
		return nil, p.fail("unexpected data after the JSON value")
	}
	return v, nil
}

func (p *jsParser) fail(what string) error {
	return fmt.Errorf("%s at byte %d", what, p.i)
}

// space skips JSON's four whitespace characters (and no others: JSON.parse
// refuses U+00A0 or U+FEFF between tokens).
func (p *jsParser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsParser) value() (*jsValue, error) {
	if p.i >= len(p.s) {
		return nil, p.fail("unexpected end of JSON input")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		units, err := p.str()
		if err != nil {
			return nil, err
		}
		return &jsValue{kind: jsString, str: units}, nil
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	for _, lit := range []struct {
		text string
		kind jsKind
	}{{"null", jsNull}, {"true", jsTrue}, {"false", jsFalse}} {
		if len(p.s)-p.i >= len(lit.text) && p.s[p.i:p.i+len(lit.text)] == lit.text {
			p.i += len(lit.text)
			return &jsValue{kind: lit.kind}, nil
		}
	}
	return nil, p.fail(fmt.Sprintf("unexpected token %q", p.s[p.i]))
}

func (p *jsParser) enter() error {
	if p.depth++; p.depth > maxJSDepth {
		return p.fail(errJSDepth.Error())
	}
	return nil
}

func (p *jsParser) object() (*jsValue, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	p.i++ // {
	v := &jsValue{kind: jsObject, members: map[string]*jsValue{}}
	p.space()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return v, nil
	}
	for {
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return nil, p.fail("expected a member name")
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, p.fail("expected ':' after a member name")
		}
		p.i++
		p.space()
		val, err := p.value()
		if err != nil {
			return nil, err
		}
		v.members[unitKey(key)] = val // last wins, as in JSON.parse
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			p.space()
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return v, nil
		}
		return nil, p.fail("expected ',' or '}' in an object")
	}
}

func (p *jsParser) array() (*jsValue, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	p.i++ // [
	v := &jsValue{kind: jsArray}
	p.space()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return v, nil
	}
	for {
		el, err := p.value()
		if err != nil {
			return nil, err
		}
		v.elems = append(v.elems, el)
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			p.space()
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return v, nil
		}
		return nil, p.fail("expected ',' or ']' in an array")
	}
}

// number reads a JSON number and rounds it to the nearest double, as JS
// does: beyond the double range it is an infinity (which the canonical form
// writes as null), below it a zero.
func (p *jsParser) number() (*jsValue, error) {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.s) && '0' <= p.s[p.i] && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.s[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.s) && p.s[p.i] == '0':
		p.i++
	case digits() == 0:
		return nil, p.fail("expected a digit")
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, p.fail("expected a digit after '.'")
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, p.fail("expected a digit in the exponent")
		}
	}
	f, err := strconv.ParseFloat(p.s[start:p.i], 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, p.fail("bad number")
	}
	return &jsValue{kind: jsNumber, num: f}, nil
}

// str reads a string literal into UTF-16 units. \uXXXX escapes append
// their unit as it is, so an escaped pair makes one character and a lone
// escape a lone surrogate, as in JS.
func (p *jsParser) str() ([]uint16, error) {
	p.i++ // "
	var units []uint16
	for {
		if p.i >= len(p.s) {
			return nil, p.fail("unterminated string")
		}
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return units, nil
		case c < 0x20:
			return nil, p.fail("control character in a string")
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return nil, p.fail("unterminated escape")
			}
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				units = append(units, uint16(e))
			case 'b':
				units = append(units, '\b')
			case 'f':
				units = append(units, '\f')
			case 'n':
				units = append(units, '\n')
			case 'r':
				units = append(units, '\r')
			case 't':
				units = append(units, '\t')
			case 'u':
				if len(p.s)-p.i < 4 {
					return nil, p.fail("short \\u escape")
				}
				var u uint16
				for _, h := range []byte(p.s[p.i : p.i+4]) {
					d := strings.IndexByte("0123456789abcdef", h|0x20) // |0x20 lowers A-F
					if d < 0 || h < '0' {
						return nil, p.fail("bad \\u escape")
					}
					u = u<<4 | uint16(d)
				}
				units = append(units, u)
				p.i += 4
			default:
				return nil, p.fail("bad escape")
			}
		case c < utf8.RuneSelf:
			units = append(units, uint16(c))
			p.i++
		default:
			r, n := utf8.DecodeRuneInString(p.s[p.i:])
			units = utf16.AppendRune(units, r)
			p.i += n
		}
	}
}

// unitKey is the map key of a member name: its units, big-endian.
func unitKey(units []uint16) string {
	b := make([]byte, 2*len(units))
	for i, u := range units {
		binary.BigEndian.PutUint16(b[2*i:], u)
	}
	return string(b)
}

func keyUnits(key string) []uint16 {
	units := make([]uint16, len(key)/2)
	for i := range units {
		units[i] = binary.BigEndian.Uint16([]byte(key[2*i:]))
	}
	return units
}

// appendStable appends v's canonical text: members sorted by UTF-16 code
// units, no whitespace, numbers and strings as JSON.stringify writes them
// (a number that is not finite as null).
func appendStable(b []byte, v *jsValue) []byte {
	switch v.kind {
	case jsFalse:
		return append(b, "false"...)
	case jsTrue:
		return append(b, "true"...)
	case jsNumber:
		return appendESNumber(b, v.num)
	case jsString:
		return appendJSUnits(b, v.str)
	case jsArray:
		b = append(b, '[')
		for i, el := range v.elems {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendStable(b, el)
		}
		return append(b, ']')
	case jsObject:
		// Big-endian unit keys sort bytewise in code-unit order.
		keys := slices.Sorted(maps.Keys(v.members))
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSUnits(b, keyUnits(k))
			b = append(b, ':')
			b = appendStable(b, v.members[k])
		}
		return append(b, '}')
	}
	return append(b, "null"...)
}

// appendJSUnits appends a string as JSON.stringify writes it (ES2019
// well-formed): '"' and '\\' escaped, control characters as \b \t \n \f \r
// or \u00xx, a lone surrogate as \udxxx (lower-case hex), and everything
// else, U+2028, U+2029, DEL and <>& included, raw.
func appendJSUnits(b []byte, units []uint16) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(units); i++ {
		u := units[i]
		switch {
		case u == '"' || u == '\\':
			b = append(b, '\\', byte(u))
		case u == '\b':
			b = append(b, `\b`...)
		case u == '\t':
			b = append(b, `\t`...)
		case u == '\n':
			b = append(b, `\n`...)
		case u == '\f':
			b = append(b, `\f`...)
		case u == '\r':
			b = append(b, `\r`...)
		case u < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[u>>4], hex[u&0xF])
		case utf16.IsSurrogate(rune(u)):
			if u < 0xDC00 && i+1 < len(units) && 0xDC00 <= units[i+1] && units[i+1] <= 0xDFFF {
				b = utf8.AppendRune(b, utf16.DecodeRune(rune(u), rune(units[i+1])))
				i++
				continue
			}
			b = append(b, '\\', 'u', hex[u>>12], hex[u>>8&0xF], hex[u>>4&0xF], hex[u&0xF])
		default:
			b = utf8.AppendRune(b, rune(u))
		}
	}
	return append(b, '"')
}

// appendESNumber appends f as ECMAScript Number::toString (ECMA-262
// 6.1.6.1.20) writes it, which JSON.stringify uses: the shortest digits
// that round-trip, plain notation for exponents -7 < n <= 21, else
// d.ddde±n; -0 as 0; NaN and the infinities as null (JSON.stringify).
func appendESNumber(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return append(b, "null"...)
	case f == 0:
		return append(b, '0')
	case f < 0:
		b = append(b, '-')
		f = -f
	}
	// Shortest round-trip digits, as d.ddde±x.
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expText, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expText)
	digits := mant[:1]
	if len(mant) > 2 {
		digits += mant[2:]
	}
	k, n := len(digits), exp+1 // f = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		for range n - k {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, "0."...)
		for range -n {
			b = append(b, '0')
		}
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, int64(n-1), 10)
	}
	return b
}

// esNumber formats f as JavaScript's String(f) does (for the finite
// values a bound or a message holds).
func esNumber(f float64) string { return string(appendESNumber(nil, f)) }
