package ledger

// The scanner's JSON reader. A ledger scan must decide, per line, exactly
// what JSON.parse would (valid JSON or not, an object or not, which value
// each member ends up with) and then read about a dozen known members. A
// reader made for that does it without a map or reflection: unescaped
// string values are substrings of the line, and the grammar is ECMA-404
// (the grammar JSON.parse and RFC 8259 share), checked iteratively so a
// deeply nested foreign value cannot grow the stack.

// kind is the JSON type of a member value.
type kind uint8

const (
	kindAbsent kind = iota
	kindString
	kindNumber
	kindNull
	kindBool
	kindObject
	kindArray
)

// Known member slots, in the reference order.
const (
	fPhase = iota
	fIdempotencyKey
	fRunID
	fSpanID
	fTool
	fArgsHash
	fExecutor
	fWorkdir
	fStartedAt
	fAttemptID
	fDurationMs
	fOutcome
	fExitCode
	fSignal
	fBytes
	fBytesBase64
	fSHA256
	fRecoveredAt
	numFields
)

func fieldSlot(key string) int {
	switch key {
	case "phase":
		return fPhase
	case "idempotencyKey":
		return fIdempotencyKey
	case "runId":
		return fRunID
	case "spanId":
		return fSpanID
	case "tool":
		return fTool
	case "argsHash":
		return fArgsHash
	case "executor":
		return fExecutor
	case "workdir":
		return fWorkdir
	case "startedAt":
		return fStartedAt
	case "attemptId":
		return fAttemptID
	case "durationMs":
		return fDurationMs
	case "outcome":
		return fOutcome
	case "exitCode":
		return fExitCode
	case "signal":
		return fSignal
	case "bytes":
		return fBytes
	case "bytesBase64":
		return fBytesBase64
	case "sha256":
		return fSHA256
	case "recoveredAt":
		return fRecoveredAt
	}
	return -1
}

// value is one top-level member value: its type, its decoded string or
// number, and its raw JSON text.
type value struct {
	kind kind
	str  string
	num  float64
	raw  string
}

// member is a top-level member the ledger does not know (a foreign
// writer's extra field), kept as raw JSON.
type member struct {
	key, raw string
}

// object holds the members of one parsed row. As in JSON.parse, a repeated
// key keeps its last value.
type object struct {
	f     [numFields]value
	extra []member
}

// reader parses one line. It is reused across lines; scratch and stack are
// its only allocations.
type reader struct {
	s       string
	i       int
	scratch []byte
	stack   []byte
}

// parse reads s as JSON.parse would. isJSON is false when JSON.parse would
// throw; isObject is false for any other JSON value. When both are true,
// obj holds the members.
func (p *reader) parse(s string, obj *object) (isJSON, isObject bool) {
	p.s, p.i = s, 0
	obj.f = [numFields]value{}
	obj.extra = obj.extra[:0]
	p.ws()
	if p.i >= len(s) {
		return false, false
	}
	if s[p.i] != '{' {
		ok := p.skipValue()
		p.ws()
		return ok && p.i == len(s), false
	}
	if !p.topObject(obj) {
		return false, false
	}
	p.ws()
	return p.i == len(s), true
}

func (p *reader) topObject(obj *object) bool {
	p.i++ // '{'
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return true
	}
	for {
		key, ok := p.str()
		if !ok || !p.colon() {
			return false
		}
		start := p.i
		var v value
		if p.i >= len(p.s) {
			return false
		}
		switch c := p.s[p.i]; {
		case c == '"':
			v.kind = kindString
			if v.str, ok = p.str(); !ok {
				return false
			}
		case c == '{' || c == '[':
			v.kind = kindObject
			if c == '[' {
				v.kind = kindArray
			}
			if !p.skipValue() {
				return false
			}
		case c == 't' || c == 'f' || c == 'n':
			if !p.literal() {
				return false
			}
			v.kind = kindBool
			if c == 'n' {
				v.kind = kindNull
			}
		default:
			v.kind = kindNumber
			if v.num, ok = p.number(); !ok {
				return false
			}
		}
		v.raw = p.s[start:p.i]
		if slot := fieldSlot(key); slot >= 0 {
			obj.f[slot] = v
		} else {
			obj.extra = append(obj.extra, member{key: key, raw: v.raw})
		}
		p.ws()
		if p.i >= len(p.s) {
			return false
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			p.ws()
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

func (p *reader) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// colon consumes optional whitespace, ':' and optional whitespace.
func (p *reader) colon() bool {
	p.ws()
	if p.i >= len(p.s) || p.s[p.i] != ':' {
		return false
	}
	p.i++
	p.ws()
	return true
}

// skipValue validates one value of any type without keeping it, using an
// explicit stack of open containers.
func (p *reader) skipValue() bool {
	p.stack = p.stack[:0]
	for {
		// A value is expected here.
		if p.i >= len(p.s) {
			return false
		}
		switch c := p.s[p.i]; {
		case c == '{' || c == '[':
			p.i++
			p.ws()
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			if p.i < len(p.s) && p.s[p.i] == closer {
				p.i++
				break
			}
			p.stack = append(p.stack, closer)
			if c == '{' && !p.key() {
				return false
			}
			continue
		case c == '"':
			if !p.skipStr() {
				return false
			}
		case c == 't' || c == 'f' || c == 'n':
			if !p.literal() {
				return false
			}
		default:
			if _, ok := p.numberText(); !ok {
				return false
			}
		}
		// A value ended: close containers until one wants another element.
		for {
			if len(p.stack) == 0 {
				return true
			}
			p.ws()
			if p.i >= len(p.s) {
				return false
			}
			top := p.stack[len(p.stack)-1]
			c := p.s[p.i]
			p.i++
			if c == top {
				p.stack = p.stack[:len(p.stack)-1]
				continue
			}
			if c != ',' {
				return false
			}
			p.ws()
			if top == '}' && !p.key() {
				return false
			}
			break
		}
	}
}

// key reads a member name and its colon inside a skipped object.
func (p *reader) key() bool {
	return p.skipStr() && p.colon()
}
