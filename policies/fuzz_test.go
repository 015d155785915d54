package policies

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzParsePolicy: Parse never panics, and whatever it accepts validates and
// survives a round trip through the JSON `moat policy show` prints. Seeds
// live in testdata/fuzz/FuzzParsePolicy; the built-ins are added here.
func FuzzParsePolicy(f *testing.F) {
	for _, name := range Builtins() {
		b, err := builtinFS.ReadFile("builtin/" + name + ".json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(bytes.NewReader(data))
		if err != nil {
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
