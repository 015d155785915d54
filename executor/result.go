package executor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf16"
)

// ParseResult turns a tool's captured stdout into its JSON result (the
// reference's parseToolResult, contract 1.3): the bytes are decoded as UTF-8
// with replacement, trimmed with the JavaScript whitespace set, and parsed;
// empty text is JSON null, and any JSON value is a valid result. Text that
// is not JSON is a protocol error naming the tool.
func ParseResult(stdout []byte, tool string) (json.RawMessage, error) {
	text := trimJS(decodeLossy(stdout))
	if text == "" {
		return json.RawMessage("null"), nil
	}
	if !json.Valid([]byte(text)) {
		return nil, protocolError(tool)
	}
	return json.RawMessage(text), nil
}

func protocolError(tool string) *Error {
	return newError(CodeProtocol, nil, "tool '%s' did not write a JSON result to stdout (write diagnostics to stderr)", tool)
}

// stdinDocument is the one document written to the tool's stdin (contract
// 1.2): {"tool":...,"args":...,"idempotencyKey":...}, compact, members in
// that order, without a trailing newline.
func stdinDocument(req *Request, args json.RawMessage) []byte {
	b := make([]byte, 0, len(args)+len(req.Tool)+len(req.IdempotencyKey)+48)
	b = append(b, `{"tool":`...)
	b = appendJSString(b, req.Tool)
	b = append(b, `,"args":`...)
	b = append(b, args...)
	b = append(b, `,"idempotencyKey":`...)
	b = appendJSString(b, req.IdempotencyKey)
	return append(b, '}')
}

// appendJSString appends s quoted as JS JSON.stringify does (appendJSUnits:
// '"', '\\' and control characters escaped, U+2028/U+2029 and <>& raw; Go's
// encoding/json escapes more, which changes bytes the reference compares).
// Bytes that are not UTF-8 become U+FFFD, as no JS string holds them.
func appendJSString(b []byte, s string) []byte {
	return appendJSUnits(b, utf16.Encode([]rune(s)))
}

// compactArgs validates raw call arguments and returns them compacted; nil
// or empty args are JSON null.
func compactArgs(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage("null"), nil
	}
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		return nil, fmt.Errorf("args are not valid JSON: %w", err)
	}
	return out.Bytes(), nil
}
