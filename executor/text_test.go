package executor

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestTrimJSUsesTheECMAScriptSet(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"\ufeff {} \u3000", "{}"},
		{"\u0085{}\u0085", "\u0085{}\u0085"}, // NEL is not JS whitespace
		{"\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\t\n\v\f\r x", "x"},
		{"\u200b x", "\u200b x"}, // zero-width space is not whitespace either
		{"   ", ""},
	} {
		if got := trimJS(tc.in); got != tc.want {
			t.Errorf("trimJS(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDecodeLossyMaximalSubpart(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{[]byte("ok"), "ok"},
		{[]byte{0xE2, 0x82}, "\ufffd"},                   // truncated 3-byte sequence: one replacement
		{[]byte{0xF0, 0x9F, 0x98}, "\ufffd"},             // truncated 4-byte sequence: one
		{[]byte{0xFF, 0xFE, 0x80}, "\ufffd\ufffd\ufffd"}, // three invalid bytes: three
		{[]byte{0xC3, 0x28}, "\ufffd("},
		{[]byte{0xED, 0xA0, 0x80}, "\ufffd\ufffd\ufffd"}, // a surrogate is not a prefix
		{[]byte{0xE0, 0x80}, "\ufffd\ufffd"},             // overlong lead: not a prefix
	} {
		if got := decodeLossy(tc.in); got != tc.want {
			t.Errorf("decodeLossy(% x) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTailUTF16(t *testing.T) {
	if got := tailUTF16("abcdef", 3); got != "def" {
		t.Fatalf("tail = %q", got)
	}
	// "😀" is two UTF-16 units: the last three units of "a😀b" are "😀b".
	if got := tailUTF16("a😀b", 3); got != "😀b" {
		t.Fatalf("tail = %q", got)
	}
}

func TestParseResult(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"", "null"},
		{" \n\t", "null"},
		{"\ufeff{\"a\":1}\n", `{"a":1}`},
		{"42", "42"},
		{`"s"`, `"s"`},
		{"[1,2]", "[1,2]"},
		{"null", "null"},
		{`{"a":1,"a":2}`, `{"a":1,"a":2}`},
	} {
		got, err := ParseResult([]byte(tc.out), "t")
		if err != nil || string(got) != tc.want {
			t.Errorf("ParseResult(%q) = %s, %v; want %s", tc.out, got, err, tc.want)
		}
	}
	var v map[string]int
	got, _ := ParseResult([]byte(`{"a":1,"a":2}`), "t")
	if err := json.Unmarshal(got, &v); err != nil || v["a"] != 2 {
		t.Errorf("duplicate keys: last must win, got %v", v)
	}
	for _, bad := range []string{"this is not json", "{", "\u0085{}", "1 2"} {
		_, err := ParseResult([]byte(bad), "sloppy")
		if !errors.Is(err, ErrProtocol) || err.Error() != "tool 'sloppy' did not write a JSON result to stdout (write diagnostics to stderr)" {
			t.Errorf("ParseResult(%q) err = %v, want the protocol error", bad, err)
		}
	}
}

func TestStdinDocumentIsTheReferenceBytes(t *testing.T) {
	req := &Request{Tool: "echo_tool", IdempotencyKey: "conf-key"}
	args, err := compactArgs(json.RawMessage("{ \"behavior\": \"echo\",\n \"payload\": {\"hello\":\"world\",\"n\":7} }"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"tool":"echo_tool","args":{"behavior":"echo","payload":{"hello":"world","n":7}},"idempotencyKey":"conf-key"}`
	if got := string(stdinDocument(req, args)); got != want {
		t.Fatalf("stdin = %s\nwant    %s", got, want)
	}
	req.IdempotencyKey = "a\u2028<\x01\"\n"
	if got := string(appendJSString(nil, req.IdempotencyKey)); got != "\"a\u2028<\\u0001\\\"\\n\"" {
		t.Fatalf("JS string quoting = %s", got)
	}
}

func TestErrorIsByCode(t *testing.T) {
	err := error(newError(CodeTimeout, nil, "tool 'x' exceeded 5ms and was killed"))
	if !errors.Is(err, ErrTimeout) || errors.Is(err, ErrExit) {
		t.Fatal("errors.Is must match by code only")
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeTimeout {
		t.Fatal("errors.As must find the *Error")
	}
}
