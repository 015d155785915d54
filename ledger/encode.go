package ledger

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// The row encoder writes exactly what the reference writes with
// JSON.stringify({phase, ...entry}) (contract 8.4): members in the
// reference order, attemptId omitted when empty, strings quoted the
// ECMAScript way. encoding/json is not used because it escapes U+2028,
// U+2029 and (by default) <, > and &, and writes -0 as "-0"; JSON.stringify
// does none of that (ECMA-262 QuoteJSONString, Number::toString).

// appendIntentRow appends the intent line, including its "\n".
func appendIntentRow(b []byte, in *Intent) ([]byte, error) {
	b = append(b, `{"phase":"intent"`...)
	b, err := appendIntentFields(b, in)
	if err != nil {
		return nil, err
	}
	return append(b, "}\n"...), nil
}

// appendRecordRow appends the outcome line, including its "\n".
func appendRecordRow(b []byte, r *Record) ([]byte, error) {
	switch r.Outcome {
	case OutcomeOK, OutcomeError, OutcomeTimeout:
	default:
		return nil, fmt.Errorf("encode outcome row: outcome %q is not ok, error or timeout", r.Outcome)
	}
	b = append(b, `{"phase":"outcome"`...)
	b, err := appendIntentFields(b, &r.Intent)
	if err != nil {
		return nil, err
	}
	if b, err = appendNumberMember(b, "durationMs", float64(r.DurationMs)); err != nil {
		return nil, err
	}
	b = append(b, `,"outcome":`...)
	b = appendJSString(b, string(r.Outcome))
	b = append(b, `,"exitCode":`...)
	if r.ExitCode == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*r.ExitCode), 10)
	}
	b = append(b, `,"signal":`...)
	if r.Signal == nil {
		b = append(b, "null"...)
	} else {
		if !utf8.ValidString(*r.Signal) {
			return nil, fmt.Errorf("encode outcome row: signal is not valid UTF-8")
		}
		b = appendJSString(b, *r.Signal)
	}
	return append(b, "}\n"...), nil
}

func appendIntentFields(b []byte, in *Intent) ([]byte, error) {
	strs := [...]struct{ name, v string }{
		{"idempotencyKey", in.IdempotencyKey},
		{"runId", in.RunID},
		{"spanId", in.SpanID},
		{"tool", in.Tool},
		{"argsHash", in.ArgsHash},
		{"executor", in.Executor},
		{"workdir", in.Workdir},
	}
	for _, s := range strs {
		var err error
		if b, err = appendStringMember(b, s.name, s.v); err != nil {
			return nil, err
		}
	}
	b, err := appendNumberMember(b, "startedAt", float64(in.StartedAt))
	if err != nil {
		return nil, err
	}
	if in.AttemptID != "" {
		return appendStringMember(b, "attemptId", in.AttemptID)
	}
	return b, nil
}

// appendStringMember refuses invalid UTF-8: JSON.stringify cannot produce
// it, encoding/json would silently turn it into U+FFFD (changing an
// idempotency key), and raw bytes would make the line corrupt for every
// reader. Refusing the row refuses the dispatch, which is the safe side.
func appendStringMember(b []byte, name, v string) ([]byte, error) {
	if !utf8.ValidString(v) {
		return nil, fmt.Errorf("encode row: %s is not valid UTF-8", name)
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSString(b, v), nil
}

// appendNumberMember refuses NaN and infinities: JSON.stringify would
// write null there, which the scan rules reject, so the row would be
// corrupt the moment it was written.
func appendNumberMember(b []byte, name string, v float64) ([]byte, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, fmt.Errorf("encode row: %s is %v, not a finite number", name, v)
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSNumber(b, v), nil
}

const hexDigits = "0123456789abcdef"

// appendJSString quotes s as ECMA-262 QuoteJSONString does for a
// well-formed string: only '"', '\\' and the C0 controls are escaped (the
// five short forms, else \u00xx with lower-case hex); everything else,
// U+2028 and U+2029 included, is written as is. s must be valid UTF-8.
func appendJSString(b []byte, s string) []byte {
	b = append(b, '"')
	return append(appendJSStringBody(b, s), '"')
}

// appendJSStringBody is appendJSString without the quotes.
func appendJSStringBody(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	return append(b, s[start:]...)
}

// appendJSNumber formats a finite v as ECMA-262 Number::toString: the
// shortest round-trip digits, plain notation for 1e-7 < |v| < 1e21,
// exponent notation ("1e+21", "1e-7") outside, and -0 as "0".
func appendJSNumber(b []byte, v float64) []byte {
	if v == 0 {
		return append(b, '0')
	}
	if a := math.Abs(v); a < 1e-6 || a >= 1e21 {
		n := len(b)
		b = strconv.AppendFloat(b, v, 'e', -1, 64)
		// Go writes a two-digit exponent ("1e-07"); ECMAScript does not.
		if m := len(b); m-n >= 4 && b[m-4] == 'e' && b[m-3] == '-' && b[m-2] == '0' {
			b[m-2] = b[m-1]
			b = b[:m-1]
		}
		return b
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// appendTornRow appends the quarantine row for a torn fragment (8.4):
// bytes is the lossy (WHATWG) decode kept for old readers, bytesBase64 and
// sha256 pin the exact bytes.
func appendTornRow(b []byte, fragment []byte, recoveredAt Millis) ([]byte, error) {
	sum := sha256.Sum256(fragment)
	b = append(b, `{"phase":"torn","bytes":`...)
	b = appendJSString(b, lossyDecode(fragment, false))
	b = append(b, `,"bytesBase64":"`...)
	b = base64.StdEncoding.AppendEncode(b, fragment)
	b = append(b, `","sha256":"`...)
	b = hex.AppendEncode(b, sum[:])
	b = append(b, '"')
	b, err := appendNumberMember(b, "recoveredAt", float64(recoveredAt))
	if err != nil {
		return nil, err
	}
	return append(b, "}\n"...), nil
}

// MarshalJSON writes m as JSON.stringify writes a number: -0 as 0 and,
// since a scanned foreign row may hold a number beyond float64 range
// (JSON.parse reads 1e400 as Infinity), non-finite values as null.
func (m Millis) MarshalJSON() ([]byte, error) {
	v := float64(m)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return appendJSNumber(nil, v), nil
}
