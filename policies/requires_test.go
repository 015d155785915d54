package policies

import (
	"strings"
	"testing"
)

func TestRequiresMode(t *testing.T) {
	strict, err := Builtin("strict")
	if err != nil {
		t.Fatal(err)
	}
	if strict.Requires == nil || strict.Requires.Mode != "full" {
		t.Fatalf("strict requires %+v, want mode full", strict.Requires)
	}
	// A policy over strict cannot weaken its mode; one over default can
	// ask for any.
	for _, c := range []struct{ doc, want string }{
		{`{"extends": "strict", "requires": {"mode": "no-proc"}}`, "full"},
		{`{"extends": "strict"}`, "full"},
		{`{"extends": "default", "requires": {"mode": "no-proc"}}`, "no-proc"},
		{`{"extends": "default", "requires": {"mode": "full"}}`, "full"},
	} {
		p, err := Parse(strings.NewReader(c.doc))
		if err == nil {
			p, err = Resolve(p)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.doc, err)
		}
		if p.Requires == nil || p.Requires.Mode != c.want {
			t.Fatalf("%s resolves to requires %+v, want mode %s", c.doc, p.Requires, c.want)
		}
	}
	_, err = Parse(strings.NewReader(`{"requires": {"mode": "half"}, "unfiltered": true}`))
	fe := FieldErrors(err)
	if len(fe) != 1 || fe[0].Path != "requires.mode" || !strings.Contains(fe[0].Reason, "full, no-proc") {
		t.Fatalf("an unknown mode: %v, want one error on requires.mode naming the modes", err)
	}
}
