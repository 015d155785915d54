package executor

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzCanonical: on UTF-8 text, parseJS accepts exactly the JSON grammar
// (as encoding/json's Valid does), and the canonical text is JSON and its
// own canonical form.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `"\ud800"`, `[1e400,-0,0.1]`, `{"\uffff":1,"😀":2}`, ` [ ] `, `{"a":[{"b":null}]}`, `01`, `"\u00"`, `1.`, `-`, `{"a" 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if !utf8.Valid(doc) {
			return
		}
		canon, err := canonical(doc)
		if (err == nil) != json.Valid(doc) {
			t.Fatalf("canonical(%q) err %v, json.Valid %v", doc, err, json.Valid(doc))
		}
		if err != nil {
			return
		}
		if !json.Valid(canon) {
			t.Fatalf("canonical(%q) = %q is not JSON", doc, canon)
		}
		again, err := canonical(canon)
		if err != nil || string(again) != string(canon) {
			t.Fatalf("canonical is not idempotent on %q: %q, %v", canon, again, err)
		}
	})
}
