package testenv

import (
	"errors"
	"flag"
	"testing"
)

// SkipExamples puts the examples whose need is missing into -test.skip,
// keeps what the caller skips, and skips none under MOAT_REQUIRE_ALL=1.
func TestSkipExamples(t *testing.T) {
	skip := flag.Lookup("test.skip")
	saved, savedNeeds := skip.Value.String(), exampleNeeds
	t.Cleanup(func() { skip.Value.Set(saved); exampleNeeds = savedNeeds })
	missing := func() error { return errors.New("no such thing here") }
	present := func() error { return nil }

	cases := []struct {
		name, requireAll, given, want string
	}{
		{"missing", "", "", "^ExampleA$"},
		{"missing, with a skip given", "", "TestSlow", "TestSlow|^ExampleA$"},
		{"missing, with MOAT_REQUIRE_ALL=1", "1", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(RequireAllVar, c.requireAll)
			skip.Value.Set(c.given)
			exampleNeeds = nil
			ExamplesNeed("^ExampleA$", missing)
			ExamplesNeed("^ExampleB$", present)
			SkipExamples()
			if got := skip.Value.String(); got != c.want {
				t.Errorf("-test.skip is %q, want %q", got, c.want)
			}
		})
	}
}
