package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// FuzzParsePolicy: Parse never panics; whatever it accepts validates and
// survives a round trip through the JSON `moat policy show` prints; and
// whatever it refuses that is one well-formed JSON object is refused with
// *FieldError values only, each naming a path. Seeds live in
// testdata/fuzz/FuzzParsePolicy; the built-ins are added here, shrunk.
//
// Why shrunk: the fuzzing engine minimizes every input that reaches new
// code before it goes on (up to -fuzzminimizetime, 60 s by default), one
// byte at a time, one full execution per byte. Started from the 16 KiB
// default allowlist, that took the whole minutes' budget per new input: 19
// executions in 60 s (issue 22). A seed with one rule of each shape and one
// name per rule reaches the same code in a few hundred bytes.
func FuzzParsePolicy(f *testing.F) {
	for _, name := range Builtins() {
		b, err := builtinFS.ReadFile("builtin/" + name + ".json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(shrinkSeed(f, b))
	}
	// No built-in has an egress section: one with a name, a wildcard, a
	// localhost rule and each form of range, with and without a port.
	f.Add([]byte(`{"name":"e","unfiltered":true,"egress":{"allow":["pypi.org","*.pythonhosted.org:443","localhost:8080","*.localhost:3000"],` +
		`"cidrs":["10.0.0.0/8","127.0.0.1/32:8080","127.0.0.1:3000","::1","[::1]/128:8080","[fd00::]/8:443"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(bytes.NewReader(data))
		if err != nil {
			if oneObject(data) {
				// Every line of the message is one *FieldError with a path.
				msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "parse policy: "), "invalid policy: ")
				lines := strings.Split(msg, "\n")
				fes := FieldErrors(err)
				if len(fes) != len(lines) {
					t.Fatalf("a well-formed object is refused with an error that names no field: %d field errors in %q", len(fes), err)
				}
				for i, fe := range fes {
					if fe.Path == "" || fe.Reason == "" || fe.Error() != lines[i] {
						t.Fatalf("field error %d: %+v for the line %q", i, fe, lines[i])
					}
				}
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse accepted a policy that does not validate: %v", err)
		}
		shown, err := p.MarshalIndent()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(bytes.NewReader(shown))
		if err != nil {
			t.Fatalf("shown policy does not parse: %v\n%s", err, shown)
		}
		a, _ := json.Marshal(p)
		b, _ := json.Marshal(back)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip differs:\n%s\n%s", a, b)
		}
	})
}

// shrinkSeed keeps, of a built-in's seccomp rules, the first of each shape
// (action, errno, number of arguments) with its first name, and writes the
// document compactly.
func shrinkSeed(f *testing.F, b []byte) []byte {
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		f.Fatal(err)
	}
	if sc, ok := doc["seccomp"].(map[string]any); ok {
		seen := map[string]bool{}
		var kept []any
		for _, r := range sc["syscalls"].([]any) {
			rule := r.(map[string]any)
			args, _ := rule["args"].([]any)
			shape := fmt.Sprint(rule["action"], rule["errnoRet"], len(args))
			if seen[shape] {
				continue
			}
			seen[shape] = true
			rule["names"] = rule["names"].([]any)[:1]
			kept = append(kept, rule)
		}
		sc["syscalls"] = kept
	}
	out, err := json.Marshal(doc)
	if err != nil {
		f.Fatal(err)
	}
	return out
}

// oneObject reports whether data is one JSON object and nothing else but
// white space: the documents whose every problem has a field to name.
func oneObject(data []byte) bool {
	trimmed := bytes.TrimLeft(data, " \t\r\n") // JSON's white space, no other
	return json.Valid(data) && len(trimmed) > 0 && trimmed[0] == '{'
}
