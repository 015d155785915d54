package policies

import (
	"bytes"
	"reflect"
	"testing"
)

// TestBuiltinsTakeTheFastPath: every embedded policy decodes strictly and
// validates, and the fast decoding gives exactly what Parse gives, so
// parseBuiltin never needs Parse's slower second pass.
func TestBuiltinsTakeTheFastPath(t *testing.T) {
	for _, name := range Builtins() {
		b, err := builtinFS.ReadFile("builtin/" + name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		fast := new(Policy)
		if err := decodeOne(b, fast, true); err != nil {
			t.Fatalf("%s: strict decoding: %v", name, err)
		}
		if err := fast.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		slow, err := Parse(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: Parse: %v", name, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s: the fast decoding differs from Parse", name)
		}
	}
}

// TestResolveLeavesItsInputAlone: merge reuses what it owns, so Resolve
// must hand it a copy of the caller's policy.
func TestResolveLeavesItsInputAlone(t *testing.T) {
	p := &Policy{Name: "mine", Extends: "default", Env: []string{"A"}, Limits: Limits{Required: []string{"pids"}}}
	before := clone(p)
	out, err := Resolve(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, before) {
		t.Fatalf("Resolve modified its input:\n%+v\nwas\n%+v", p, before)
	}
	out.Env[0] = "changed"
	out.Limits.Required[0] = "changed"
	if p.Env[0] != "A" || p.Limits.Required[0] != "pids" {
		t.Fatal("the resolved policy shares slices with the input")
	}

	def, err := Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	def.Extends = ""
	out, err = Resolve(def)
	if err != nil {
		t.Fatal(err)
	}
	out.Seccomp.DefaultAction = "SCMP_ACT_ALLOW"
	out.Identity.UID = 4242
	if def.Seccomp.DefaultAction == "SCMP_ACT_ALLOW" || def.Identity.UID == 4242 {
		t.Fatal("the resolved policy shares its seccomp profile or identity with the input")
	}
}

// BenchmarkBuiltinDefault is the policy load of every cold `moat run`.
func BenchmarkBuiltinDefault(b *testing.B) {
	for b.Loop() {
		if _, err := Builtin("default"); err != nil {
			b.Fatal(err)
		}
	}
}
